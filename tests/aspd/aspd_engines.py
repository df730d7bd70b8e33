"""Engines with the six ASPD tokens added (untrained: their rows are the mean embedding), and a
teacher-forcing hook that writes the markup, so blocks can be decoded without a trained model."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from paraspec.aspd.decode import AspdDecoder
from paraspec.aspd.markup import MarkupIds, add_markup_tokens
from paraspec.aspd.params import AspdParams
from paraspec.engine import Engine
from paraspec.model import kernels as cpu_kernels
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import Tokenizer
from paraspec.model.transformer import Transformer
from paraspec.runner import ModelRunner


def aspd_engine(
    model, dtype=torch.float32, kernels: cpu_kernels.Kernels | None = None, quantization=None
):
    """(engine, MarkupIds) over `model` (a path or "default") with the tokens added in memory."""
    loaded = load_model(model, dtype, keep_quantized=quantization == "gguf")
    tok = Tokenizer.from_source(loaded.tokenizer_source)
    ids = add_markup_tokens(tok, loaded.weights, loaded)
    net = Transformer(
        loaded.args, loaded.weights, dtype, quantization=quantization, kernels=kernels
    )
    return Engine(ModelRunner(net), tok, max_batch_size=8, draft_gate=False), ids


def save_aspd_folder(src: Path, dst: Path) -> Path:
    """A copy of the HF folder `src` with the six tokens in tokenizer.json and grown embeddings."""
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer as Backend

    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.suffix in (".json", ".jinja") and f.name != "tokenizer.json":
            (dst / f.name).write_text(f.read_text())
    backend = Backend.from_file(str(src / "tokenizer.json"))
    weights = {k: v.clone() for k, v in load_file(str(next(src.glob("*.safetensors")))).items()}

    class _Tok:  # what add_markup_tokens needs of a paraspec Tokenizer
        def __init__(self, b):
            self.backend, self.vocab_size = b, b.get_vocab_size()

        def encode(self, text, add_bos=False):
            return self.backend.encode(text, add_special_tokens=False).ids

    short = {"tok_embeddings": "model.embed_tokens.weight", "lm_head": "lm_head.weight"}
    w = {k: weights[v] for k, v in short.items() if v in weights}
    ids = add_markup_tokens(_Tok(backend), w)
    for k, v in short.items():
        if k in w:
            weights[v] = w[k]
    save_file(weights, str(dst / "model.safetensors"))
    backend.save(str(dst / "tokenizer.json"))
    config = json.loads((src / "config.json").read_text())
    config["vocab_size"] = max(ids.all) + 1
    (dst / "config.json").write_text(json.dumps(config))
    return dst


class Script:
    """A forcing hook: writes `titles` as a title list after `after` serial tokens of the answer,
    and closes branch k after lengths[k] content tokens (the model chooses everything else, but
    branch k's content tokens when `contents` gives them)."""

    def __init__(
        self,
        ids: MarkupIds,
        prompt_len: int,
        titles: list[list[int]],
        lengths: list[int],
        after: int = 2,
        tail: int | None = None,
        contents: list[list[int]] | None = None,
    ):
        self.ids, self.prompt_len, self.after = ids, prompt_len, after
        self.titles, self.lengths, self.contents = titles, lengths, contents
        self.plan = [t for title in titles for t in (ids.title, *title, ids.end_title)] + [ids.para]
        self.tail = tail  # serial tokens after the block before EOS (None: never forced)

    def __call__(self, context) -> int | None:
        ids = self.ids
        out = list(context[self.prompt_len :])
        if ids.para not in out:
            k = len(out) - self.after
            return self.plan[k] if 0 <= k < len(self.plan) else None
        if ids.end_para not in out:  # inside a branch: context = ... <|para|> + this branch
            branch = out[out.index(ids.para) + 1 :]
            title = branch[
                1 : branch.index(ids.colon_space[0]) if ids.colon_space[0] in branch else None
            ]
            k = self.titles.index(title) if title in self.titles else 0
            content = len(branch) - (len(self.titles[k]) + 2)
            if content >= self.lengths[k]:
                return ids.end_branch
            return self.contents[k][content] if self.contents else None
        return None


def plugin(ids: MarkupIds, force, **params) -> AspdDecoder:
    dec = AspdDecoder(AspdParams(**params))
    dec.force = force
    return dec
