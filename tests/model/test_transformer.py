"""The engine's own forward against transformers (the reference) on tiny random models."""

import pytest
import torch

from kernel_paths import per_isa
from paraspec.model.loader import load_model
from paraspec.model.transformer import SeqInput, Transformer


def _pair(path):
    import transformers

    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    lm = load_model(path, torch.float32)
    return ref, Transformer(lm.args, lm.weights, torch.float32)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_prefill_and_cached_decode_match_transformers(tiny_model_dir, arch):
    ref, model = _pair(tiny_model_dir(arch))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.args.vocab_size, (40,), generator=g)
    with torch.no_grad():
        want = ref(ids[None]).logits[0]
    cache = model.new_cache(64)
    got = model.forward(ids[:30], torch.arange(30), [SeqInput(cache, 30)])
    cache.commit(range(30))
    assert (got - want[:30]).abs().max() < 1e-4
    for i in range(30, 40):  # cached decode, one token per step
        step = model.forward(ids[i : i + 1], torch.tensor([i]), [SeqInput(cache, 1)])
        cache.commit([0])
        assert (step[0] - want[i]).abs().max() < 1e-4, f"decode step at position {i}"


def test_llama3_rope_scaling_matches_transformers(tiny_model_dir):
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
        "rope_theta": 500000.0,
    }
    ref, model = _pair(tiny_model_dir("llama", rope_parameters=scaling))
    assert model.args.rope_scaling and model.args.rope_scaling["rope_type"] == "llama3"
    ids = torch.randint(0, model.args.vocab_size, (200,))
    with torch.no_grad():
        want = ref(ids[None]).logits[0]
    got = model.forward(ids, torch.arange(200), [SeqInput(model.new_cache(256), 200)])
    assert (got - want).abs().max() < 1e-4


def test_untied_embeddings_use_lm_head(tiny_model_dir):
    lm = load_model(tiny_model_dir("llama", tie_word_embeddings=False), torch.float32)
    assert not lm.args.tie_embeddings and "lm_head" in lm.weights
    ref, model = _pair(tiny_model_dir("llama", tie_word_embeddings=False))
    ids = torch.randint(0, model.args.vocab_size, (12,))
    with torch.no_grad():
        want = ref(ids[None]).logits[0]
    got = model.forward(ids, torch.arange(12), [SeqInput(model.new_cache(16), 12)])
    assert (got - want).abs().max() < 1e-4


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_prompt_attention_matches_transformers_also_in_chunks(tiny_model_dir, arch):
    """The prefill's fast causal attention (forward(prompt=True)), in one chunk and in two (the
    second chunk attends to the first's cached keys), against transformers."""
    from paraspec.runner import ModelRunner

    ref, model = _pair(tiny_model_dir(arch))
    ids = torch.randint(0, model.args.vocab_size, (50,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = ref(ids[None]).logits[0]
    cache = model.new_cache(64)
    got = model.forward(ids, torch.arange(50), [SeqInput(cache, 50)], prompt=True)
    assert (got - want).abs().max() < 1e-4
    runner = ModelRunner(model, prefill_chunk=16)  # 4 chunks: 16, 16, 16, 2
    cache = runner.new_cache(64)
    last = runner.prefill(cache, ids.tolist())
    assert cache.length == 50 and (last - want[-1]).abs().max() < 1e-4
    step = model.forward(ids[:1], torch.tensor([50]), [SeqInput(cache, 1)])  # decode on top of it
    fresh = model.new_cache(64)
    model.forward(ids, torch.arange(50), [SeqInput(fresh, 50)])
    fresh.commit(range(50))
    assert (
        step - model.forward(ids[:1], torch.tensor([50]), [SeqInput(fresh, 1)])
    ).abs().max() < 1e-4
    with pytest.raises(ValueError, match="causal"):
        model.forward(
            ids[:4],
            torch.arange(4),
            [SeqInput(model.new_cache(8), 4, torch.ones(4, 4, dtype=torch.bool))],
            prompt=True,
        )


CACHED = 1150  # keys before the chunk: past PROMPT_ATTENTION_KEYS, where the AVX2 road changes


@pytest.fixture(scope="module")
def long_reference(tiny_model_dir):
    """A tiny llama with room for 1,150 cached keys and a 256-row chunk, and transformers' logits."""
    import transformers

    path = tiny_model_dir("llama", max_position_embeddings=1536)
    ref = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.randint(
        0, ref.config.vocab_size, (CACHED + 256,), generator=torch.Generator().manual_seed(3)
    )
    with torch.no_grad():
        want = ref(ids[None]).logits[0]
    return path, ids, want


@pytest.mark.parametrize("kernels", per_isa())
@pytest.mark.parametrize("rows", [64, 65, 256])
def test_a_prompt_chunk_over_a_long_cache_matches_transformers(long_reference, kernels, rows):
    """A prompt chunk of 64, 65 or 256 rows after more than PROMPT_ATTENTION_KEYS cached keys (a new
    turn after a reused prefix): the heights on either side of each ISA's PROMPT_ATTENTION_ROWS,
    through the csrc kernel or the torch road, on every kernel path: transformers' logits."""
    from paraspec.model import attention

    assert (
        CACHED > attention.PROMPT_ATTENTION_KEYS and 64 in attention.PROMPT_ATTENTION_ROWS.values()
    )
    path, ids, want = long_reference
    lm = load_model(path, torch.float32)
    model = Transformer(lm.args, lm.weights, torch.float32, kernels=kernels)
    cache = model.new_cache(CACHED + rows)
    model.forward(ids[:CACHED], torch.arange(CACHED), [SeqInput(cache, CACHED)], prompt=True)
    cache.commit(range(CACHED))
    got = model.forward(
        ids[CACHED : CACHED + rows],
        torch.arange(CACHED, CACHED + rows),
        [SeqInput(cache, rows)],
        prompt=True,
    )
    assert (got - want[CACHED : CACHED + rows]).abs().max() < 1e-4
