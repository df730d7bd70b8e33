"""Tokenizer: encode/decode, the chat template, stop tokens and streaming detokenisation.

Built with the `tokenizers` library from a GGUF file's metadata or from a Hugging Face folder's
tokenizer.json. A GGUF vocabulary is either byte-level BPE ('gpt2': vocab + merges, split first as
`tokenizer.ggml.pre` names: pretokenizers.py) or SentencePiece BPE ('llama': Llama-2, Mistral,
TinyLlama; pieces + scores, bytes by fallback); its control tokens become special tokens. The chat template is the model's own
Jinja template, rendered in a sandbox.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Sequence

from ..errors import ModelLoadError, RequestError
from .pretokenizers import build_pre_tokenizer, pre_tokenizer_for

GIL_FREE_CHARS = (
    4096  # longer texts are tokenized with the GIL released (a server's event loop runs on)
)
GGUF_TOKEN_NORMAL = 1
GGUF_TOKEN_UNKNOWN = 2
GGUF_TOKEN_CONTROL = 3
GGUF_TOKEN_USER_DEFINED = 4
SPM_SPACE = "\u2581"  # SentencePiece's visible space: "\u2581hello" is " hello"


class Tokenizer:
    def __init__(
        self,
        backend,
        *,
        bos_token_id: int | None,
        eos_token_ids: Sequence[int],
        add_bos: bool,
        chat_template: str | None,
        special_tokens: dict[str, str],
    ):
        self.backend = backend
        self.bos_token_id = bos_token_id
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids if t is not None)
        self.add_bos = add_bos
        self.chat_template = chat_template
        self.special_tokens = special_tokens  # bos_token / eos_token strings for the template
        self.vocab_size = backend.get_vocab_size()
        self._template = None

    @classmethod
    def from_source(cls, source: dict) -> "Tokenizer":
        if source["kind"] == "gguf":
            return cls._from_gguf(source)
        return cls._from_hf(Path(source["path"]), source.get("config", {}))

    @classmethod
    def _from_gguf(cls, s: dict) -> "Tokenizer":
        from tokenizers import AddedToken, Tokenizer as Backend, decoders, models, normalizers

        tokens = list(s["tokens"])
        types = list(s["token_type"]) or [GGUF_TOKEN_NORMAL] * len(tokens)
        special_types = {GGUF_TOKEN_CONTROL}
        if s["model"] == "gpt2":
            pre = pre_tokenizer_for(s.get("pre"))
            add_bos_default = pre.add_bos
            vocab = {t: i for i, t in enumerate(tokens)}
            merges = [tuple(m.split(" ", 1)) for m in s["merges"]]
            backend = Backend(
                models.BPE(
                    vocab,
                    merges,
                    fuse_unk=False,
                    byte_fallback=False,
                    ignore_merges=pre.ignore_merges,
                )
            )
            if pre.nfc:
                backend.normalizer = normalizers.NFC()
            backend.pre_tokenizer = build_pre_tokenizer(pre)
            backend.decoder = decoders.ByteLevel()
        elif s["model"] == "llama":
            backend = _spm_backend(
                tokens,
                types,
                s.get("scores") or [],
                add_space_prefix=s.get("add_space_prefix") is not False,
            )
            add_bos_default = True  # llama.cpp's default for SentencePiece vocabularies
            special_types.add(GGUF_TOKEN_UNKNOWN)  # llama.cpp matches <unk> in text as it does <s>
        else:
            raise ModelLoadError(
                f"GGUF tokenizer.ggml.model {s['model']!r} is not supported (paraspec "
                "reads 'gpt2' byte-level BPE and 'llama' SentencePiece vocabularies); "
                "load the model's Hugging Face folder instead"
            )
        # control tokens (<|im_start|>, <|begin_of_text|>, <s>) are special: matched in text, dropped
        # by decode(skip_special); user-defined ones (Qwen3's <think>) are matched but always
        # decoded, as llama.cpp and Hugging Face both do
        added = [
            AddedToken(t, special=ty in special_types, normalized=False)
            for t, ty in zip(tokens, types)
            if ty in special_types or ty == GGUF_TOKEN_USER_DEFINED
        ]
        backend.add_special_tokens([a for a in added if a.special])
        backend.add_tokens([a for a in added if not a.special])
        bos, eos = s.get("bos_token_id"), s.get("eos_token_id")
        eos_ids = [eos, s.get("eot_token_id")]
        add_bos = s.get("add_bos_token")
        return cls(
            backend,
            bos_token_id=bos,
            eos_token_ids=eos_ids,
            add_bos=add_bos_default if add_bos is None else bool(add_bos),
            chat_template=s.get("chat_template"),
            special_tokens={
                "bos_token": tokens[bos] if bos is not None else "",
                "eos_token": tokens[eos] if eos is not None else "",
            },
        )

    @classmethod
    def _from_hf(cls, path: Path, config: dict) -> "Tokenizer":
        from tokenizers import Tokenizer as Backend

        file = path / "tokenizer.json"
        if not file.is_file():
            raise ModelLoadError(
                f"{str(path)!r} has no tokenizer.json; save the tokenizer with "
                "transformers' save_pretrained next to the weights"
            )
        backend = Backend.from_file(str(file))
        tc = _read_json(path / "tokenizer_config.json")
        gen = _read_json(path / "generation_config.json")

        def token_str(v) -> str | None:
            return v.get("content") if isinstance(v, dict) else v

        bos_s, eos_s = token_str(tc.get("bos_token")), token_str(tc.get("eos_token"))
        bos = backend.token_to_id(bos_s) if bos_s else config.get("bos_token_id")
        eos_ids: list = []
        for src in (gen.get("eos_token_id"), config.get("eos_token_id")):
            eos_ids += src if isinstance(src, list) else [src]
        if eos_s:
            eos_ids.append(backend.token_to_id(eos_s))
        template = tc.get("chat_template")
        if template is None and (path / "chat_template.jinja").is_file():
            template = (path / "chat_template.jinja").read_text()
        add_bos = tc.get("add_bos_token")
        # as transformers: the tokenizer.json's post-processor says (Llama-3 adds BOS)
        if add_bos is None:
            add_bos = bos is not None and backend.encode("", add_special_tokens=True).ids[:1] == [
                bos
            ]
        return cls(
            backend,
            bos_token_id=bos,
            eos_token_ids=eos_ids,
            add_bos=bool(add_bos),
            chat_template=template,
            special_tokens={"bos_token": bos_s or "", "eos_token": eos_s or ""},
        )

    # ------------------------------------------------------------------------------------ text

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        if not text.isascii():
            try:
                text.encode("utf-8")
            except (
                UnicodeEncodeError
            ) as e:  # a lone surrogate ("\ud800"): not text the model can read
                raise RequestError(
                    f"the text holds an invalid Unicode character {text[e.start]!r} at "
                    f"offset {e.start} (a lone surrogate); send valid UTF-16 pairs or "
                    "drop it"
                ) from None
        if len(text) > GIL_FREE_CHARS:  # the batch call tokenizes without the GIL (same ids)
            ids = self.backend.encode_batch([text], add_special_tokens=False)[0].ids
        else:
            ids = self.backend.encode(text, add_special_tokens=False).ids
        if (self.add_bos if add_bos is None else add_bos) and self.bos_token_id is not None:
            ids = [self.bos_token_id] + ids
        return ids

    @cached_property
    def max_token_chars(self) -> int:
        """The most characters one token can stand for (the longest vocabulary string: a byte-level
        token's string has one character per byte, and a text character is at least one byte)."""
        return max(1, max(map(len, self.backend.get_vocab(with_added_tokens=True)), default=1))

    def min_tokens(self, chars: int) -> int:
        """A lower bound on the tokens of any text of `chars` characters, known without tokenizing."""
        return -(-chars // self.max_token_chars)

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special)

    def apply_chat_template(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
    ) -> str:
        if not self.chat_template:
            raise RequestError(
                "this model has no chat template; send a plain prompt (completions) "
                "instead of chat messages"
            )
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise RequestError(f"messages[{i}] must be an object with 'role' and 'content'")
        if self._template is None:
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = _raise_template_error
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            env.filters["tojson"] = _tojson
            self._template = env.from_string(self.chat_template)
        return self._template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            **({"tools": tools} if tools else {}),
            **self.special_tokens,
        )

    @cached_property
    def template_takes_tools(self) -> bool:
        """Whether the chat template renders a `tools` list itself (Qwen2.5's and Qwen3's do, SmolLM2-135M's not)."""
        if not self.chat_template:
            return False
        from jinja2 import Environment, TemplateSyntaxError, meta

        try:
            return "tools" in meta.find_undeclared_variables(
                Environment().parse(self.chat_template)
            )
        except TemplateSyntaxError:
            return "tools" in self.chat_template

    def encode_chat(self, messages: list[dict]) -> list[int]:
        text = self.apply_chat_template(messages)
        return self.encode(text, add_bos=self.chat_add_bos(text))

    def chat_add_bos(self, rendered: str) -> bool:
        """Whether a rendered chat gets a BOS: templates that write the BOS string themselves must
        not get a second one."""
        bos = self.special_tokens.get("bos_token")
        return self.add_bos and not (bos and rendered.startswith(bos))


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas for streaming.

    Decodes only the tokens since the last emitted boundary, with the previous chunk as left
    context (byte-level BPE pieces can merge across it), and holds text back while it ends in
    U+FFFD: a multi-byte character is not complete yet.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = True):
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self.ids: list[int] = []
        self.prefix_offset = 0  # start of the left-context chunk
        self.read_offset = 0  # tokens before this have been emitted

    def push(self, new_ids: Sequence[int]) -> str:
        self.ids.extend(new_ids)
        decode = self.tokenizer.decode
        prefix_text = decode(self.ids[self.prefix_offset : self.read_offset], self.skip_special)
        full_text = decode(self.ids[self.prefix_offset :], self.skip_special)
        if len(full_text) <= len(prefix_text) or full_text.endswith("\ufffd"):
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return full_text[len(prefix_text) :]

    def flush(self) -> str:
        decode = self.tokenizer.decode
        prefix_text = decode(self.ids[self.prefix_offset : self.read_offset], self.skip_special)
        full_text = decode(self.ids[self.prefix_offset :], self.skip_special)
        self.prefix_offset = self.read_offset = len(self.ids)
        return full_text[len(prefix_text) :]


def _spm_backend(
    tokens: list[str], types: list[int], scores: list[float], *, add_space_prefix: bool
):
    """A SentencePiece BPE vocabulary as a `tokenizers` BPE.

    SentencePiece (and llama.cpp after it) merges, again and again, the adjacent pair whose joined
    piece scores highest, leftmost first on ties; characters no piece covers fall back to their
    UTF-8 bytes' <0xXX> tokens. BPE merges ranked by the joined piece's score apply the same
    merges in the same order. Spaces are written as U+2581, with one more before the text (and,
    since the tokenizer normalises each piece between special tokens on its own, after every
    special token, as llama.cpp does).
    """
    from tokenizers import Tokenizer as Backend, decoders, models, normalizers

    if len(scores) != len(tokens):
        raise ModelLoadError(
            f"the GGUF's tokenizer.ggml.scores has {len(scores)} entries for "
            f"{len(tokens)} tokens; a SentencePiece vocabulary needs one score per token"
        )
    vocab = {t: i for i, t in enumerate(tokens)}
    normal = {t for t, ty in zip(tokens, types) if ty == GGUF_TOKEN_NORMAL}
    ranked = []
    for piece, ty, score in zip(tokens, types, scores):
        if ty != GGUF_TOKEN_NORMAL:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in normal and right in normal:
                ranked.append((-score, vocab[left], left, right))
    ranked.sort()
    unk = next((t for t, ty in zip(tokens, types) if ty == GGUF_TOKEN_UNKNOWN), None)
    backend = Backend(
        models.BPE(
            vocab,
            [(left, right) for *_, left, right in ranked],
            unk_token=unk,
            fuse_unk=True,
            byte_fallback="<0x00>" in vocab,
        )
    )
    steps = [normalizers.Prepend(SPM_SPACE)] if add_space_prefix else []
    backend.normalizer = normalizers.Sequence(steps + [normalizers.Replace(" ", SPM_SPACE)])
    strip = [decoders.Strip(" ", 1, 0)] if add_space_prefix else []
    backend.decoder = decoders.Sequence(
        [decoders.Replace(SPM_SPACE, " "), decoders.ByteFallback(), decoders.Fuse(), *strip]
    )
    return backend


def _tojson(
    x,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators=None,
    sort_keys: bool = False,
) -> str:
    # transformers' filter: keys in their order (a tool's schema as written), not jinja's sorted one
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_template_error(message: str):
    raise RequestError(f"the chat template rejected the messages: {message}")


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ModelLoadError(
            f"{str(path)!r} is not valid JSON ({e}); fix or delete the file"
        ) from None
