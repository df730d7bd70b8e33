"""bench/synthetic_gguf.py: the real models' shapes, llama.cpp's mix of block formats, a file that
paraspec loads and runs, and block values of the intended scale."""

import math

import numpy as np
import pytest
import torch

from paraspec.bench import synthetic_gguf as syn
from paraspec.model import ggml
from paraspec.model.args import ModelArgs
from paraspec.model.gguf_file import read_gguf
from paraspec.model.rope import rope_tables


def _kinds(plan, suffix: str) -> list[str]:
    return [t.kind for t in plan if t.name.startswith("blk.") and t.name.endswith(suffix)]


def test_llama_3_2_1b_q4_k_m_mix():
    plan = syn.tensor_plan(syn.SHAPES["llama-3.2-1b"], "Q4_K_M")
    by_name = {t.name: t for t in plan}
    # tied: no output.weight, the token embedding is the LM head and takes the output's Q6_K
    assert "output.weight" not in by_name
    assert (by_name["token_embd.weight"].shape, by_name["token_embd.weight"].kind) == (
        (128256, 2048),
        "Q6_K",
    )
    assert by_name["blk.0.attn_q.weight"].shape == (32 * 64, 2048)
    assert by_name["blk.0.attn_k.weight"].shape == (8 * 64, 2048)
    assert by_name["blk.0.ffn_down.weight"].shape == (2048, 8192)
    assert by_name["rope_freqs.weight"].shape == (32,)
    assert not any(t.name.endswith(".bias") for t in plan)
    # use_more_bits over 16 layers: 0, 1 (first eighth), 4, 7, 10, 13 (every third), 14, 15 (last eighth)
    more = [0, 1, 4, 7, 10, 13, 14, 15]
    expect = ["Q6_K" if i in more else "Q4_K" for i in range(16)]
    assert _kinds(plan, "attn_v.weight") == expect and _kinds(plan, "ffn_down.weight") == expect
    for part in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
        assert set(_kinds(plan, part + ".weight")) == {"Q4_K"}
    q4_0 = syn.tensor_plan(syn.SHAPES["llama-3.2-1b"], "Q4_0")
    assert {t.kind for t in q4_0 if t.matmul and t.name != "token_embd.weight"} == {"Q4_0"}
    assert {
        t.kind for t in syn.tensor_plan(syn.SHAPES["llama-3.2-1b"], "Q4_0", pure=True) if t.matmul
    } == {"Q4_0"}


def test_qwen_shapes_and_fallbacks():
    plan = syn.tensor_plan(syn.SHAPES["qwen2.5-1.5b"], "Q4_K_M")
    by_name = {t.name: t for t in plan}
    assert by_name["blk.27.attn_q.bias"].shape == (1536,) and by_name[
        "blk.0.attn_k.bias"
    ].shape == (256,)
    assert by_name["blk.0.ffn_gate.weight"].shape == (8960, 1536)
    assert sum(t.name.endswith("attn_norm.weight") for t in plan) == 28
    # 0.5B: 896 columns are not whole 256-superblocks: Q4_K -> Q5_0, Q6_K -> Q8_0 (llama.cpp's fallback);
    # ffn_down's 4864 columns are
    small = {t.name: t.kind for t in syn.tensor_plan(syn.SHAPES["qwen2.5-0.5b"], "Q4_K_M")}
    assert small["token_embd.weight"] == "Q8_0"
    assert small["blk.0.attn_q.weight"] == "Q5_0" and small["blk.0.attn_v.weight"] == "Q8_0"
    assert small["blk.0.ffn_down.weight"] == "Q6_K" and small["blk.3.ffn_down.weight"] == "Q4_K"


def test_weight_bytes_counts_the_tied_head_once():
    shape = syn.SHAPES["qwen2.5-1.5b"]
    plan = syn.tensor_plan(shape, "Q4_0", pure=True)
    per_layer = (1536 * 1536 * 2 + 256 * 1536 * 2 + 3 * 8960 * 1536) // 32 * 18
    head = 151936 * 1536 // 32 * 18
    assert syn.weight_bytes(plan, shape.tied) == 28 * per_layer + head


def test_llama3_rope_factors_match_the_rope_scaling_they_stand_for():
    shape = syn.SHAPES["llama-3.2-3b"]
    base = dict(
        arch="llama",
        vocab_size=10,
        dim=3072,
        n_layers=1,
        n_heads=24,
        n_kv_heads=8,
        head_dim=128,
        hidden_dim=8,
        norm_eps=1e-5,
        rope_theta=5e5,
        max_seq_len=9000,
    )
    hf = ModelArgs(
        **base,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )
    ours = ModelArgs(
        **base,
        rope_scaling={
            "rope_type": "freq_factors",
            "factors": syn.llama3_rope_factors(shape).tolist(),
        },
    )
    for a, b in zip(rope_tables(hf, 9000), rope_tables(ours, 9000)):
        torch.testing.assert_close(a, b, atol=2e-4, rtol=0)
    factors = syn.llama3_rope_factors(shape)
    assert factors[0] == 1.0 and factors[-1] == 32.0 and any(1.0 < f < 32.0 for f in factors)


@pytest.mark.parametrize("kind", ["Q4_0", "Q5_0", "Q8_0", "Q4_K", "Q6_K"])
def test_random_blocks_have_the_intended_scale(kind):
    t = syn.TensorPlan("w", (64, 512), kind)
    w = ggml.dequantize(ggml.GGUFWeight(kind, syn.random_tensor(t, np.random.default_rng(0))))
    assert abs(w.std().item() - syn.STD) < 0.1 * syn.STD
    assert abs(w.mean().item()) < 0.15 * syn.STD  # Q4_0's grid -8..7 is off centre by half a step
    assert syn.random_tensor(t, np.random.default_rng(0)).nbytes == t.nbytes


TINY = syn.SHAPES["qwen2.5-0.5b"].scaled(layers=2, vocab=49152 + 64)


def test_a_written_file_holds_the_plan(tmp_path):
    path = syn.write_synthetic(tmp_path / "tiny.gguf", TINY, "Q4_K_M")
    reader = read_gguf(path)
    written = {
        name: (t.tensor_type.name, tuple(reversed(t.shape))) for name, t in reader.tensors.items()
    }
    plan = syn.tensor_plan(TINY, "Q4_K_M")
    assert written == {t.name: (t.kind, t.shape) for t in plan}
    assert written["blk.1.ffn_up.weight"] == ("Q5_0", (4864, 896))  # 896 columns: Q4_K's fallback
    assert written["blk.1.ffn_down.weight"] == ("Q6_K", (896, 4864))  # the last eighth: more bits
    fields = reader.fields
    assert (
        fields["qwen2.block_count"],
        fields["qwen2.embedding_length"],
        fields["qwen2.attention.head_count_kv"],
    ) == (2, 896, 2)
    assert (
        len(fields["tokenizer.ggml.tokens"]) == 49216
        and fields["tokenizer.ggml.tokens"][-1] == "[PAD49215]"
    )
    assert path.stat().st_size >= sum(t.nbytes for t in plan)


# Q4_K_M mixes attn_v's format with q and k's: a dense bf16 q/k/v with Qwen2's fp32 bias on the prompt road
@pytest.mark.parametrize("quant", ["Q4_0", "Q4_K_M"])
def test_a_written_file_loads_and_decodes(tmp_path, quant):
    from paraspec import LLM, SamplingParams
    from paraspec.model.transformer import SeqInput

    path = syn.write_synthetic(tmp_path / "tiny.gguf", TINY, quant)
    llm = LLM(str(path))
    assert (
        llm.model.args.vocab_size == 49216
        and llm.model.args.qkv_bias
        and llm.config.quantization == "gguf"
    )
    model = llm.model
    cache = model.new_cache(32)
    logits = model.forward(torch.arange(100, 110), torch.arange(10), [SeqInput(cache, 10)])
    assert logits.shape == (10, 49216) and torch.isfinite(logits).all() and logits.std() > 0
    out = llm.generate(
        [list(range(100, 120))], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    )[0]
    assert len(out.token_ids) == 6 and all(0 <= t < 49216 for t in out.token_ids)
    assert not math.isnan(out.stats["tokens_per_s"])
