"""Sampling: parameter validation, penalties exactly as specified, seeded reproducibility."""

import math

import pytest
import torch

from paraspec.errors import SamplingParamsError
from paraspec.sampling.params import SamplingParams
from paraspec.sampling.processors import apply_penalties, filtered_probs
from paraspec.sampling.sampler import RequestSampler, uniform


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", -0.5),
        ("temperature", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_k", -3),
        ("repetition_penalty", 0.0),
        ("presence_penalty", 3.0),
        ("frequency_penalty", -2.5),
        ("max_tokens", 0),
        ("n", 0),
        ("min_p", 1.5),
        ("stop", [""]),
        ("logprobs", 50),
        ("temperature", "hot"),
        ("seed", 1.5),
    ],
)
def test_invalid_values_raise_one_line_errors_naming_the_field(field, value):
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams(**{field: value})
    msg = str(e.value)
    assert field in msg and "\n" not in msg
    assert isinstance(e.value, ValueError)


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = torch.tensor([2.0, -2.0, 3.0, -1.0, 0.5])
    seen = torch.tensor([True, True, False, False, True])
    out = apply_penalties(logits, seen, torch.zeros(5), repetition=2.0, presence=0.0, frequency=0.0)
    assert out.tolist() == [1.0, -4.0, 3.0, -1.0, 0.25]


def test_presence_and_frequency_penalties_subtract_over_output_counts():
    logits = torch.tensor([1.0, 1.0, 1.0])
    counts = torch.tensor([0.0, 1.0, 3.0])
    out = apply_penalties(
        logits, torch.zeros(3, dtype=torch.bool), counts, 1.0, presence=0.5, frequency=0.25
    )
    assert torch.allclose(out, torch.tensor([1.0, 1.0 - 0.25 - 0.5, 1.0 - 0.75 - 0.5]))


def test_top_k_top_p_min_p_keep_the_right_tokens():
    logits = torch.log(torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05]))
    probs, ids = filtered_probs(logits, 1.0, top_k=3, top_p=1.0, min_p=0.0)
    assert ids.tolist() == [0, 1, 2] and math.isclose(probs.sum().item(), 1.0, rel_tol=1e-6)
    probs, ids = filtered_probs(logits, 1.0, top_k=0, top_p=0.7, min_p=0.0)
    assert ids.tolist() == [0, 1]  # 0.5 < 0.7, 0.5 + 0.2 reaches it
    probs, ids = filtered_probs(logits, 1.0, top_k=0, top_p=1.0, min_p=0.25)  # keeps p >= 0.125
    assert (probs > 0).tolist() == [True, True, True, False, False]
    assert torch.allclose(probs[:3] / probs[:3].sum(), torch.tensor([0.5, 0.2, 0.15]) / 0.85)


def test_seeded_sampling_is_reproducible_and_seeds_differ():
    logits = torch.randn(1000)
    params = SamplingParams(temperature=0.9, top_p=0.95, seed=123)

    def run(seed):
        s = RequestSampler(params, [1, 2, 3], 1000, seed)
        out = []
        for _ in range(50):
            t = s.draw(logits)
            s.append(t)
            out.append(t)
        return out

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_sampler_follows_the_distribution():
    probs = torch.tensor([0.6, 0.3, 0.1])
    s = RequestSampler(SamplingParams(temperature=1.0), [], 3, seed=1)
    counts = [0, 0, 0]
    for _ in range(6000):
        t = s.draw(probs.log())
        s.append(t)
        counts[t] += 1
    assert all(abs(c / 6000 - p) < 0.025 for c, p in zip(counts, probs.tolist()))


def test_uniform_is_a_pure_function_in_unit_interval():
    vals = [uniform(5, i) for i in range(2000)]
    assert vals == [uniform(5, i) for i in range(2000)]
    assert all(0.0 <= v < 1.0 for v in vals)
    assert abs(sum(vals) / len(vals) - 0.5) < 0.03


def test_greedy_with_penalty_uses_context():
    s = RequestSampler(
        SamplingParams(temperature=0, repetition_penalty=3.0), prompt=[0], vocab_size=3
    )
    logits = torch.tensor([3.0, 2.0, 0.0])
    assert s.draw(logits) == 1  # token 0 was in the prompt: 3/3 = 1 < 2
    s.append(1)
    assert s.draw(logits) == 0  # now both seen: 1.0 vs 0.667


def test_top_p_below_fp32s_range_keeps_the_top_token():
    """top_p=1e-46 is a valid float but 0 in fp32: the filter still keeps the most likely token
    (it emptied the vocabulary and raised IndexError in the engine's step)."""
    logits = torch.tensor([0.5, 3.0, -1.0, 2.0])
    probs, ids = filtered_probs(logits, 1.0, 0, 1e-46, 0.0)
    assert ids.tolist() == [1] and probs.tolist() == [1.0]
    sampler = RequestSampler(SamplingParams(temperature=1.0, top_p=1e-46), [0], 4, seed=3)
    assert sampler.draw(logits) == 1


@pytest.mark.parametrize("t", [1e-40, 1e-20, 9e-6])
def test_temperatures_below_eps_are_greedy_not_nan(t):
    """logits / 1e-40 overflows fp32 (inf, NaN probabilities: garbage text); such temperatures
    sample the argmax, as the tempered distribution does."""
    params = SamplingParams(temperature=t)
    assert params.greedy
    logits = torch.tensor([0.5, 3.0, -1.0, 2.0])
    assert RequestSampler(params, [0], 4, seed=1).draw(logits) == 1
    assert not SamplingParams(temperature=1e-4).greedy


def test_the_answer_identity_holds_what_decides_the_tokens_and_nothing_that_only_cuts_them():
    greedy = SamplingParams(temperature=0.0)
    assert greedy.answer_identity(7) == b""  # plain greedy: the prompt alone decides
    # cuts end an answer: the tokens before the cut are the same
    cut = SamplingParams(temperature=0.0, max_tokens=5, stop=["x"], stop_token_ids=[3])
    assert cut.answer_identity(7) == b""
    penalised = SamplingParams(temperature=0.0, repetition_penalty=1.3)
    assert penalised.answer_identity(7) not in (b"", None)
    # sampling without a seed draws: no identity; with one, the sequence's seed is part of it
    assert SamplingParams(temperature=0.8).answer_identity(7) is None
    seeded = SamplingParams(temperature=0.8, seed=1)
    assert seeded.answer_identity(7) != seeded.answer_identity(8)
    assert seeded.answer_identity(7) != SamplingParams(temperature=0.9, seed=1).answer_identity(7)
    assert seeded.answer_identity(7) == SamplingParams(temperature=0.8, seed=1).answer_identity(7)
