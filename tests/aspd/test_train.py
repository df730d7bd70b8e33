"""ASPD training: the training forward equals paraspec's forward under the same mask and positions
(and transformers' on a causal one) for every family the loader runs (Llama, Llama-3 rope scaling
and GQA, Llama with attention biases, Qwen2.5's q/k/v biases, Qwen3's q/k norms (and biases); tied
and untied heads; a GGUF file), LoRA merges exactly, a few steps on a tiny random model reduce the loss (fp32 or bf16 matmuls), `paraspec aspd
train` + `export` give a folder whose logits are the adapted training forward's, adapters
save/export/load, and what the forward cannot represent is refused in one line."""

import pytest
import torch

from paraspec.aspd import data, synth, train
from paraspec.aspd.hf_folder import write_hf_folder
from paraspec.aspd.lora import LoRALinear, load_adapter, save_adapter
from paraspec.aspd.markup import MarkupIds, add_markup_tokens
from paraspec.aspd.train_command import base, merged_weights
from paraspec.cli import main
from paraspec.errors import ModelLoadError
from paraspec.model.loader import load_model
from paraspec.model.tokenizer import Tokenizer
from paraspec.model.transformer import SeqInput, Transformer
from tiny_models import FAMILIES, family_dir, write_gguf

# "llama": conftest's plain tiny llama (tied); "qwen3-bias": attention_bias (q/k/v and o_proj
# biases beside the q/k norms); the others: tiny_models.FAMILIES, tied and untied
CASES = [
    pytest.param("llama", True, id="llama-tied"),
    pytest.param("qwen3-bias", False, id="qwen3-bias-untied"),
] + [
    pytest.param(f, tied, id=f"{f}-{'tied' if tied else 'untied'}")
    for f in FAMILIES
    for tied in (True, False)
]


def _dir(tiny_model_dir, family: str = "llama", tied: bool = True):
    if family == "llama":
        return tiny_model_dir()
    if family == "qwen3-bias":
        return tiny_model_dir("qwen3", head_dim=32, attention_bias=True, tie_word_embeddings=tied)
    return family_dir(tiny_model_dir, family, tied)


def _tiny(tiny_model_dir, rank=4, family="llama", tied=True):
    m = load_model(_dir(tiny_model_dir, family, tied), torch.float32)
    tok = Tokenizer.from_source(m.tokenizer_source)
    n_base = m.weights["tok_embeddings"].shape[0]
    ids = add_markup_tokens(tok, m.weights, m)
    model = train.TrainModel(m.args, m.weights, n_base, rank=rank, alpha=2.0 * rank)
    return m, tok, ids, n_base, model


def test_encode_masks_forced_prefixes_and_uses_the_layout(tiny_model_dir):
    _, tok, ids, _, _ = _tiny(tiny_model_dir)
    ex = synth.generate(1, 2)[0]
    e = train.encode(ex, tok, ids)
    targets = [e.ids[r + 1] for r in e.loss_rows]
    assert ids.end_para not in targets and ids.branch not in targets
    assert ids.para in targets and ids.title in targets and ids.end_branch in targets
    assert not any(e.ids[r] == ids.end_branch for r in e.loss_rows)
    b = [i for i, t in enumerate(e.ids) if t == ids.branch]
    assert len({int(e.positions[i]) for i in b}) == 1  # Same-Seq: every branch starts at p + 1
    assert not e.visible[b[1], b[0]]  # siblings never see each other
    # each branch as decode.py forces it (<|branch|>, title, ":") and then the BPE of " content"
    title = tok.encode(ex.blocks[0].branches[0].title)
    assert e.ids[b[0] : b[0] + len(title) + 2] == [ids.branch, *title, ids.colon_space[0]]
    end = e.ids.index(ids.end_branch, b[0])
    assert (
        tok.decode(e.ids[b[0] + 1 : end])
        == ex.blocks[0].branches[0].title + ": " + ex.blocks[0].branches[0].content
    )
    plain = train.encode(ex, tok, None)
    assert tok.decode(plain.ids[-len(plain.loss_rows) :]).rstrip("<|im_end|>").endswith(ex.labelled)
    assert plain.positions.tolist() == list(range(len(plain.ids)))


def _logits(model: train.TrainModel, e: train.Encoded) -> torch.Tensor:
    with torch.no_grad():
        return model.logits(
            model.hidden(torch.tensor([e.ids]), e.positions[None], e.visible[None])
        )[0]


@pytest.mark.parametrize("family,tied", CASES)
def test_training_forward_equals_paraspec_forward_with_the_branch_mask(
    tiny_model_dir, tmp_path, family, tied
):
    m, tok, ids, n_base, model = _tiny(tiny_model_dir, family=family, tied=tied)
    assert model.untied == (not tied)
    for mod in model.modules():
        if isinstance(mod, LoRALinear):
            torch.nn.init.normal_(mod.lora_B, std=0.05)
    with torch.no_grad():
        for rows in (model.new_embed, *([model.new_head] if model.untied else [])):
            rows.add_(torch.randn_like(rows) * 0.1)
    e = train.encode(synth.generate(1, 4)[0], tok, ids)
    ref = _logits(model, e)
    adapter = {k: v.detach() for k, v in model.adapter_tensors().items()}
    assert ("new_head" in adapter) == (not tied)
    weights = merged_weights(m, n_base, adapter, {"alpha": 8.0, "rank": 4})
    # through the exported Hugging Face folder, as --model loads it
    folder = write_hf_folder(
        tmp_path / "merged", m.args, weights, m.tokenizer_source, with_markup=True
    )
    back = load_model(folder, torch.float32)
    assert Tokenizer.from_source(back.tokenizer_source).encode("<|para|>") == [ids.para]
    assert back.weights.keys() == m.weights.keys()  # biases, q/k norms and the head kept
    assert back.args == m.args and back.args.rope_scaling == m.args.rope_scaling
    for kernels in ("torch", None):
        from paraspec.model import kernels as ck

        net = Transformer(
            back.args, back.weights, torch.float32, kernels=ck.choose(kernels) if kernels else None
        )
        out = net.forward(
            torch.tensor(e.ids),
            e.positions,
            [SeqInput(net.new_cache(len(e.ids)), len(e.ids), e.visible)],
        )
        assert (out - ref).abs().max() < 1e-4


def test_a_weight_the_forward_does_not_use_is_refused(tiny_model_dir):
    m = load_model(tiny_model_dir(), torch.float32)
    with pytest.raises(
        ModelLoadError,
        match="tensor 'layers.1.ffn_bias', which the ASPD training forward cannot represent",
    ):
        train.TrainModel(
            m.args, {**m.weights, "layers.1.ffn_bias": torch.zeros(128)}, m.args.vocab_size
        )


def test_lora_merge_equals_unmerged():
    w = torch.randn(24, 16)
    lin = LoRALinear(w, rank=3, alpha=6.0)
    torch.nn.init.normal_(lin.lora_B)
    x = torch.randn(5, 16)
    assert torch.allclose(lin(x), x @ lin.merged().T, atol=1e-5)
    assert not torch.allclose(lin.merged(), w)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_few_steps_reduce_the_loss_and_adapters_round_trip(tiny_model_dir, tmp_path, dtype):
    _, tok, ids, n_base, model = _tiny(tiny_model_dir, rank=8)
    data = [train.encode(ex, tok, ids) for ex in synth.generate(4, 9)]
    before = train.loss_on(model, data).item()
    stats = train.fit(
        model,
        data,
        train.TrainConfig(epochs=10, batch=4, lr=1e-2, max_minutes=30, dtype=dtype),
        log=lambda m: None,
    )
    after = train.loss_on(model, data).item()
    assert stats["steps"] == 10 and stats["dtype"] == dtype, stats
    assert after < before - 0.5, (before, after, stats)
    assert model.new_embed.dtype == torch.float32  # bf16 matmuls, fp32 parameters
    save_adapter(tmp_path / "a.safetensors", model.adapter_tensors(), {"rank": 8, "alpha": 16.0})
    tensors, meta = load_adapter(tmp_path / "a.safetensors")
    assert meta == {"rank": 8, "alpha": 16.0} and tensors["new_embed"].shape == (6, model.args.dim)
    assert torch.allclose(
        tensors["layers.0.wqkv.lora_B"], model.layers[0].wqkv.lora_B.detach(), atol=1e-3
    )
    # the six new rows trained too (tied: input and output rows)
    assert not torch.allclose(model.new_embed.detach(), model.base_embed.mean(0).expand(6, -1))


@pytest.mark.parametrize("family,tied", CASES)
def test_training_forward_equals_transformers_on_a_causal_mask(tiny_model_dir, family, tied):
    """Independent of paraspec's forward (and of rope_tables): transformers' own model, positions
    0..n-1 under a causal mask; a fresh adapter leaves the base vocabulary's logits unchanged."""
    import transformers

    _, _, _, n_base, model = _tiny(tiny_model_dir, family=family, tied=tied)
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        _dir(tiny_model_dir, family, tied), dtype=torch.float32
    ).eval()
    tokens = torch.randint(0, n_base, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ref(tokens).logits[0]
    causal = torch.ones(40, 40, dtype=torch.bool).tril_()
    got = _logits(model, train.Encoded(tokens[0].tolist(), torch.arange(40), causal, []))
    assert got.shape[1] == n_base + 6 and (got[:, :n_base] - want).abs().max() < 1e-4


def _write_data(folder):
    data.write_jsonl(folder / "train.jsonl", synth.generate(4, 5))
    return folder


@pytest.mark.parametrize(
    "family,tied",
    [
        c
        for c in CASES
        if c.id
        in (
            "llama-tied",
            "qwen2.5-untied",
            "qwen2.5-tied",
            "qwen3-untied",
            "qwen3-bias-untied",
            "llama3-untied",
            "llama-bias-untied",
        )
    ]
    + [pytest.param("llama3-gguf", False, id="llama3-untied-gguf")],
)
def test_cli_train_then_export_gives_the_adapted_forward(tiny_model_dir, tmp_path, family, tied):
    """`paraspec aspd train` a couple of steps, `paraspec aspd export`: paraspec's LLM loads the
    folder, and its logits under the branch mask are the training forward's with the adapter
    (the merge of LoRA, biases kept, the new embedding rows and an untied head's new rows).
    From a GGUF file too (llama.cpp's layout: permuted q/k rows, rope_freqs for llama3 RoPE)."""
    from paraspec import LLM

    if family.endswith("-gguf"):
        path = str(
            write_gguf(
                family_dir(tiny_model_dir, family.removesuffix("-gguf"), tied), tmp_path / "m.gguf"
            )
        )
    else:
        path = str(_dir(tiny_model_dir, family, tied))
    adapter, out = tmp_path / "adapters" / "aspd.safetensors", tmp_path / "export"
    assert (
        main(
            [
                "aspd",
                "train",
                "--model",
                path,
                "--variant",
                "aspd",
                "--data",
                str(_write_data(tmp_path)),
                "--out",
                str(adapter.parent),
                "--examples",
                "4",
                "--batch",
                "2",
                "--max-minutes",
                "1",
                "--lr",
                "1e-2",
                "--rank",
                "4",
                "--no-extracted",
            ]
        )
        == 0
    )
    # no --model: export loads the base model the adapter's training recorded
    assert main(["aspd", "export", "--adapter", str(adapter), "--out", str(out)]) == 0
    tensors, meta = load_adapter(adapter)
    assert meta["train"]["steps"] == 2 and ("new_head" in tensors) == (not tied)
    assert meta["model"] == path
    loaded, tok, ids, n_base = base(path)
    trained = train.TrainModel(
        loaded.args, loaded.weights, n_base, rank=meta["rank"], alpha=meta["alpha"]
    )
    trained.load_adapter(tensors)
    untrained = train.TrainModel(
        loaded.args, loaded.weights, n_base, rank=meta["rank"], alpha=meta["alpha"]
    )
    llm = LLM(str(out), dtype="float32")
    assert MarkupIds.from_tokenizer(llm.tokenizer) == ids
    e = train.encode(synth.generate(1, 7)[0], llm.tokenizer, ids)
    assert e.ids == train.encode(synth.generate(1, 7)[0], tok, ids).ids
    want = _logits(trained, e)
    got = llm.model.forward(
        torch.tensor(e.ids),
        e.positions,
        [SeqInput(llm.model.new_cache(len(e.ids)), len(e.ids), e.visible)],
    )
    assert (got - want).abs().max() < 1e-4
    # the check can fail: two steps moved the logits, the six markup columns too
    moved = (want - _logits(untrained, e)).abs()
    assert moved[:, :n_base].max() > 1e-3 and moved[:, n_base:].max() > 1e-3, moved.max()


def test_the_control_of_an_untied_model_trains_and_exports_without_markup_rows(
    tiny_model_dir, tmp_path
):
    from paraspec.aspd.train_command import without_markup

    path = str(family_dir(tiny_model_dir, "qwen2.5", False))
    adapter, out = tmp_path / "adapters" / "control.safetensors", tmp_path / "export"
    assert (
        main(
            [
                "aspd",
                "train",
                "--model",
                path,
                "--variant",
                "control",
                "--data",
                str(_write_data(tmp_path)),
                "--out",
                str(adapter.parent),
                "--examples",
                "4",
                "--batch",
                "2",
                "--lr",
                "1e-2",
                "--rank",
                "4",
                "--no-extracted",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "aspd",
                "export",
                "--variant",
                "control",
                "--model",
                path,
                "--adapter",
                str(adapter),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    tensors, meta = load_adapter(adapter)
    assert tensors["new_embed"].shape[0] == tensors["new_head"].shape[0] == 0
    back = load_model(out, torch.float32)
    loaded, tok, _, n_base = base(path)
    assert back.weights["tok_embeddings"].shape[0] == back.weights["lm_head"].shape[0] == n_base
    trained = train.TrainModel(
        loaded.args, without_markup(loaded.weights, n_base), n_base, rank=4, alpha=meta["alpha"]
    )
    trained.load_adapter(tensors)
    e = train.encode(synth.generate(1, 7)[0], tok, None)
    net = Transformer(back.args, back.weights, torch.float32)
    got = net.forward(
        torch.tensor(e.ids), e.positions, [SeqInput(net.new_cache(len(e.ids)), len(e.ids))]
    )
    assert (got - _logits(trained, e)).abs().max() < 1e-4


REFUSED = {  # a tiny model of `arch` with these config values -> what the one-line error names
    "sliding-window": (
        "qwen2",
        dict(use_sliding_window=True, sliding_window=16, max_window_layers=1),
        "sliding-window attention",
    ),
    "partial-rope": ("llama", dict(partial_rotary_factor=0.5), "partial_rotary_factor 0.5"),
    "yarn": (
        "llama",
        dict(
            rope_parameters={
                "rope_type": "yarn",
                "factor": 2.0,
                "rope_theta": 10000.0,
                "original_max_position_embeddings": 512,
            }
        ),
        "rope type 'yarn'",
    ),
    "gelu": ("llama", dict(hidden_act="gelu"), "hidden_act 'gelu'"),
}


def _with_attention_sinks(hf, out):
    """A copy of the folder hf whose weights file also holds a tensor the loader does not read
    (gpt-oss-style attention sinks)."""
    import shutil

    from safetensors.torch import load_file, save_file

    out = shutil.copytree(hf, out)
    sd = load_file(str(out / "model.safetensors"))
    save_file(
        {**sd, "model.layers.1.self_attn.sinks": torch.zeros(4)},
        str(out / "model.safetensors"),
        metadata={"format": "pt"},
    )
    return out


@pytest.mark.parametrize("case", list(REFUSED) + ["gguf-experts", "unread-tensor"])
def test_what_the_forward_cannot_represent_is_refused_in_one_line(
    tiny_model_dir, tmp_path, capsys, case
):
    if case == "gguf-experts":
        hf = family_dir(tiny_model_dir, "qwen2.5", True)
        path, match = (
            write_gguf(hf, tmp_path / "m.gguf", metadata={"qwen2.expert_count": 4}),
            "qwen2.expert_count = 4",
        )
    elif case == "unread-tensor":
        path = _with_attention_sinks(tiny_model_dir(), tmp_path / "m")
        match = "tensor 'model.layers.1.self_attn.sinks' that paraspec's loader does not read"
    else:
        arch, config, match = REFUSED[case]
        path = tiny_model_dir(arch, **config)
    data_dir = _write_data(tmp_path)
    capsys.readouterr()  # what making the model printed
    code = main(
        [
            "aspd",
            "train",
            "--model",
            str(path),
            "--variant",
            "aspd",
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "adapters"),
            "--no-extracted",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and match in err and "cannot represent" in err, err
    assert not (tmp_path / "adapters").exists()
