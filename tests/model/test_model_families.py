"""The model families users run, against transformers in fp32, on tiny random models.

Qwen2/2.5 (q/k/v biases), Qwen3 (q/k RMS norms, head_dim != hidden / heads), Llama-3 (rope_scaling
llama3, GQA; and a llama with attention biases, whose GGUF q/k biases are permuted too), each with
an untied and a tied LM head, saved as a Hugging Face folder (one fp32 file, fp32 shards with
their index, bf16) and as GGUF the way llama.cpp's convert_hf_to_gguf.py writes it (F32, F16;
tiny_models.write_gguf): a prompt and decode steps give transformers' logits (with the weights
rounded as the file stores them) on the torch path and the compiled kernels; greedy
memory_decoding and lookahead give AR's tokens.
"""

import shutil

import pytest
import torch

from kernel_paths import per_isa
from paraspec.errors import ModelLoadError
from paraspec.model import kernels as kernels_module
from paraspec.model.gguf_file import read_gguf
from paraspec.model.loader import load_model
from paraspec.model.transformer import SeqInput, Transformer
from tiny_models import FAMILIES, family_dir, write_gguf

FORMATS = ["hf-fp32", "hf-sharded", "hf-bf16", "gguf-f32", "gguf-f16"]
ATOL = 1e-4


@pytest.fixture(scope="module")
def written(tiny_model_dir, tmp_path_factory):
    """written(family, tied, fmt) -> (what paraspec loads, transformers' fp32 model with the
    weights as that file stores them); each made once per module (both kernel paths use it)."""
    import transformers

    cache = {}

    def make(family: str, tied: bool, fmt: str):
        key = (family, tied, fmt)
        if key not in cache:
            hf = family_dir(tiny_model_dir, family, tied)
            if (family, tied, "hf-fp32") not in cache:
                ref = transformers.AutoModelForCausalLM.from_pretrained(
                    hf, dtype=torch.float32
                ).eval()
                cache[family, tied, "hf-fp32"] = hf, ref
            base = cache[family, tied, "hf-fp32"][1]
            if fmt != "hf-fp32":
                out = tmp_path_factory.mktemp(f"{family}-{fmt}")
                cache[key] = write_format(hf, base, fmt, out), rounded(base, fmt)
        return cache[key]

    return make


def rounded(model, fmt: str):
    """A copy of transformers' fp32 `model` with its weights as `fmt` stores them."""
    import copy

    ref = copy.deepcopy(model)
    with torch.no_grad():
        # a bf16 checkpoint holds everything in bf16; GGUF keeps 1-D tensors F32
        for p in ref.parameters():
            if fmt == "hf-bf16" or (fmt == "gguf-f16" and p.ndim == 2):
                p.copy_(p.to(torch.bfloat16 if fmt == "hf-bf16" else torch.float16).float())
    return ref


def write_format(hf_dir, model, fmt: str, out):
    """The model (transformers', at hf_dir) written as `fmt` under out; returns what paraspec loads."""
    if fmt.startswith("gguf"):
        return write_gguf(hf_dir, out / "model.gguf", fmt.split("-")[1].upper())
    if fmt == "hf-bf16":
        import copy

        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(out)
        from safetensors import safe_open

        with safe_open(str(out / "model.safetensors"), "pt") as f:  # the file really holds bf16
            assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    else:
        model.save_pretrained(out, max_shard_size="40KB")
        assert (
            len(list(out.glob("model-*.safetensors"))) > 2
            and (out / "model.safetensors.index.json").is_file()
        )
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(hf_dir / f, out / f)
    return out


def assert_logits_match(path, ref, kernels, prompt: int = 12, steps: int = 4) -> None:
    """A prompt prefilled as the runner does (prompt=True), then `steps` cached decode steps:
    every row within ATOL of transformers' logits over the whole sequence."""
    lm = load_model(path, torch.float32)
    model = Transformer(lm.args, lm.weights, torch.float32, kernels=kernels)
    ids = torch.randint(
        0, lm.args.vocab_size, (prompt + steps,), generator=torch.Generator().manual_seed(3)
    )
    with torch.no_grad():
        want = ref(ids[None]).logits[0]
    cache = model.new_cache(64)
    got = model.forward(ids[:prompt], torch.arange(prompt), [SeqInput(cache, prompt)], prompt=True)
    cache.commit(range(prompt))
    assert (got - want[:prompt]).abs().max() < ATOL, "prompt"
    for i in range(prompt, prompt + steps):
        step = model.forward(ids[i : i + 1], torch.tensor([i]), [SeqInput(cache, 1)])
        cache.commit([0])
        assert (step[0] - want[i]).abs().max() < ATOL, f"decode step at position {i}"


def _cases() -> list:
    """Every format on this CPU's default kernels (tied heads; untied on one file of each kind);
    every kernel path on the fp32 folder. (A file's format and the kernels that run it are
    independent: loading ends in the same weights, the kernels never see the file.)"""
    default = kernels_module.default().name
    out = []
    for family in FAMILIES:
        for tied in (True, False):
            for fmt in FORMATS if tied else ("hf-fp32", "gguf-f32"):
                for p in per_isa():
                    if p.id == default or fmt == "hf-fp32":
                        out.append(
                            pytest.param(
                                family,
                                tied,
                                fmt,
                                p.values[0],
                                marks=p.marks,
                                id=f"{family}-{'tied' if tied else 'untied'}-{fmt}-{p.id}",
                            )
                        )
    return out


@pytest.mark.parametrize("family,tied,fmt,kernels", _cases())
def test_logits_equal_transformers(written, family, tied, fmt, kernels):
    path, ref = written(family, tied, fmt)
    lm = load_model(path, torch.float32)
    arch, kwargs = FAMILIES[family]
    a = lm.args
    assert (a.arch, a.tie_embeddings, a.qkv_bias, a.qk_norm) == (
        arch,
        tied,
        arch == "qwen2" or bool(kwargs.get("attention_bias")),
        arch == "qwen3",
    )
    assert a.head_dim == kwargs.get("head_dim", 64 // kwargs.get("heads", 4))
    assert a.n_kv_heads == kwargs.get("kv_heads", 2) and ("lm_head" in lm.weights) == (not tied)
    assert_logits_match(path, ref, kernels)


def _gguf_layout(path) -> tuple[dict, dict]:
    g = read_gguf(path)
    return (
        {name: t.tensor_type.name for name, t in g.tensors.items()},
        {k: v for k, v in g.fields.items() if not k.startswith("tokenizer.")},
    )


@pytest.mark.parametrize("family", list(FAMILIES))
def test_gguf_layout_is_llama_cpps(tiny_model_dir, tmp_path, family):
    """The files the logits tests load have convert_hf_to_gguf's names, types and keys."""
    arch, kwargs = FAMILIES[family]
    tensors, kv = _gguf_layout(
        write_gguf(family_dir(tiny_model_dir, family, True), tmp_path / "m.gguf", "F16")
    )
    assert "output.weight" not in tensors and tensors["token_embd.weight"] == "F16"
    assert tensors["blk.1.attn_norm.weight"] == tensors["output_norm.weight"] == "F32"
    assert (
        ("blk.0.attn_q.bias" in tensors)
        == ("blk.0.attn_v.bias" in tensors)
        == (arch == "qwen2" or "attention_bias" in kwargs)
    )
    assert (
        ("blk.0.attn_q_norm.weight" in tensors)
        == ("blk.1.attn_k_norm.weight" in tensors)
        == (arch == "qwen3")
    )
    assert ("rope_freqs.weight" in tensors) == (family == "llama3")
    theta = kwargs.get("rope_parameters", {}).get("rope_theta", 10000.0)
    assert kv["general.architecture"] == arch and kv[f"{arch}.rope.freq_base"] == pytest.approx(
        theta
    )
    assert kv[f"{arch}.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)
    assert kv[f"{arch}.attention.head_count"] == kwargs.get("heads", 4)
    assert kv[f"{arch}.attention.head_count_kv"] == kwargs.get("kv_heads", 2)
    head_dim = kwargs.get("head_dim", 64 // kwargs.get("heads", 4))
    # the converter writes them where config.json has head_dim (Qwen2's has not)
    if arch != "qwen2":
        assert (
            kv[f"{arch}.attention.key_length"] == kv[f"{arch}.attention.value_length"] == head_dim
        )
    if arch == "llama":
        assert kv["llama.rope.dimension_count"] == head_dim
    tensors, _ = _gguf_layout(
        write_gguf(family_dir(tiny_model_dir, family, False), tmp_path / "u.gguf")
    )
    assert tensors["output.weight"] == "F32"


def test_llama_q_k_rows_are_stored_permuted_and_loaded_back(tiny_model_dir, tmp_path):
    """llama.cpp interleaves a llama head's rotary halves in attn_q/attn_k (weights and biases);
    the loader restores HF's layout: its fused q/k/v equal the checkpoint's."""
    from safetensors.torch import load_file

    hf = family_dir(tiny_model_dir, "llama-bias", False)
    sd = load_file(str(hf / "model.safetensors"))
    path = write_gguf(hf, tmp_path / "m.gguf")
    stored = {name: t.data for name, t in read_gguf(path).tensors.items()}
    q = sd["model.layers.0.self_attn.q_proj.weight"]
    assert not torch.equal(torch.from_numpy(stored["blk.0.attn_q.weight"].copy()), q)
    assert not torch.equal(
        torch.from_numpy(stored["blk.0.attn_k.bias"].copy()),
        sd["model.layers.0.self_attn.k_proj.bias"],
    )
    w = load_model(path, torch.float32).weights
    p = "model.layers.0.self_attn."
    assert torch.equal(w["layers.0.wqkv"], torch.cat([sd[p + f"{n}_proj.weight"] for n in "qkv"]))
    assert torch.equal(w["layers.0.bqkv"], torch.cat([sd[p + f"{n}_proj.bias"] for n in "qkv"]))


def test_qwen3_gguf_without_q_norm_is_refused(tiny_model_dir, tmp_path):
    hf = family_dir(tiny_model_dir, "qwen3", True)
    path = write_gguf(hf, tmp_path / "m.gguf", skip_tensors=("blk.0.attn_q_norm.weight",))
    with pytest.raises(ModelLoadError, match="lacks tensor 'blk.0.attn_q_norm.weight'"):
        load_model(path, torch.float32)


def test_partial_rope_gguf_is_refused(tiny_model_dir, tmp_path):
    hf = family_dir(tiny_model_dir, "llama3", True)
    path = write_gguf(hf, tmp_path / "m.gguf", metadata={"llama.rope.dimension_count": 4})
    with pytest.raises(
        ModelLoadError, match=r"llama.rope.dimension_count = 4, not the head size 8"
    ):
        load_model(path, torch.float32)


def test_sharded_folder_missing_a_shard_names_it(written, tmp_path):
    out = shutil.copytree(written("qwen2.5", False, "hf-sharded")[0], tmp_path / "m")
    shard = sorted(out.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(ModelLoadError, match=f"lacks shard '{shard.name}'"):
        load_model(out, torch.float32)


# ------------------------------------------------------------------------------------ lossless

PLUGINS = {
    "memory_decoding": '{"plugin_type": "memory_decoding", "decoding_length": 16}',
    "lookahead": '{"plugin_type": "la", "level": 4, "window": 5, "guess_set_size": 5}',
}
PROMPTS = ["1, 2, 3, 1, 2, 3, 1, 2,"]  # repeats: both drafters find drafts to verify


@pytest.mark.parametrize(
    "numerics", [pytest.param(dict(dtype="float32"), id="fp32"), pytest.param({}, id="default")]
)
@pytest.mark.parametrize(
    "family,fmt",
    [
        ("qwen2.5", "hf-fp32"),
        ("qwen3", "gguf-f32"),
        ("llama3", "hf-fp32"),
        ("llama-bias", "gguf-f16"),
    ],
)
def test_greedy_parallel_decoding_equals_ar(written, family, fmt, numerics):
    from paraspec import LLM, SamplingParams

    path = written(family, family != "qwen2.5", fmt)[0]
    # this CPU's default kernels (every path: tests/test_engine.py)
    llm = LLM(str(path), **numerics)
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    ar = llm.generate(PROMPTS, params)
    for name, plugin in PLUGINS.items():
        par = llm.generate(PROMPTS, params, plugin_params=plugin)
        for a, b in zip(ar, par):
            assert b.token_ids == a.token_ids, name
        assert sum(o.stats["decode_steps"] for o in par) <= sum(o.stats["decode_steps"] for o in ar)
