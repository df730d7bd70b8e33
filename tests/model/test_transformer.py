"""The engine's own forward against transformers (the reference) on tiny random models."""
import pytest
import torch

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
        step = model.forward(ids[i:i + 1], torch.tensor([i]), [SeqInput(cache, 1)])
        cache.commit([0])
        assert (step[0] - want[i]).abs().max() < 1e-4, f"decode step at position {i}"


def test_llama3_rope_scaling_matches_transformers(tiny_model_dir):
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64, "rope_theta": 500000.0}
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
