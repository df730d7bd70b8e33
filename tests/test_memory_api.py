"""LLM.save_memory / load_memory: the drafting memory (trie and the hybrid's past outputs)
survives a restart, its drafts are used, greedy output is unchanged, and a bad file is one line."""

import pytest

from paraspec import LLM, SamplingParams
from paraspec.decoding.memory.memory_file import MemoryFileError

HYBRID = {"plugin_type": "hybrid"}
PROMPT = "abc abc abc"
PARAMS = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def model(tiny_model_dir) -> str:
    return str(tiny_model_dir("llama", n_layers=2, hidden=64, heads=4, kv_heads=2))


def test_memory_survives_save_and_a_new_llm_drafts_from_it(model, tmp_path):
    plain = LLM(model, dtype="float32").generate(PROMPT, PARAMS)[0]
    first_llm = LLM(model, dtype="float32", plugin_params=HYBRID)
    first = first_llm.generate(PROMPT, PARAMS)[0]
    path = tmp_path / "memory.npz"
    first_llm.save_memory(str(path))
    saved = first_llm.drafter.output_memory.tokens().tolist()
    assert len(saved) == len(first.token_ids) + 1  # the output and its separator

    second_llm = LLM(model, dtype="float32", plugin_params=HYBRID)
    second_llm.load_memory(str(path))
    assert second_llm.drafter.output_memory.tokens().tolist() == saved
    second = second_llm.generate(PROMPT, PARAMS)[0]
    assert plain.token_ids == first.token_ids == second.token_ids  # lossless
    # the answer was in memory: it is drafted whole, in far fewer forward passes
    assert second.stats["decode_steps"] < first.stats["decode_steps"]
    assert second.stats["decode_steps"] <= len(second.token_ids) // 4


def test_a_corrupt_memory_file_is_one_line_and_changes_nothing(model, tmp_path):
    llm = LLM(model, dtype="float32", plugin_params=HYBRID)
    llm.generate(PROMPT, PARAMS)
    before = llm.drafter.output_memory.tokens().tolist()
    good = tmp_path / "memory.npz"
    llm.save_memory(str(good))
    bad = tmp_path / "truncated.npz"
    bad.write_bytes(good.read_bytes()[:-40])
    with pytest.raises(MemoryFileError) as e:
        llm.load_memory(str(bad))
    assert (
        "\n" not in str(e.value)
        and str(bad) in str(e.value)
        and "save the memory again" in str(e.value)
    )
    assert llm.drafter.output_memory.tokens().tolist() == before


def test_a_prompt_answered_before_is_replayed_whole_from_its_first_step(model, tmp_path):
    prompt = "the answer to this very prompt"
    plain = LLM(model, dtype="float32")
    llm = LLM(model, dtype="float32", plugin_params=HYBRID)
    first = llm.generate(prompt, PARAMS)[0]
    again = llm.generate(prompt, PARAMS)[0]
    assert again.token_ids == first.token_ids == plain.generate(prompt, PARAMS)[0].token_ids
    # the prefill writes the first token, the answer's other 39 go out as one draft at once
    assert again.stats["decode_steps"] == 1 < first.stats["decode_steps"]
    # a sampled request of the same prompt may leave the answer: still the plain model's tokens
    sampled = SamplingParams(max_tokens=40, temperature=1.0, seed=3, ignore_eos=True)
    assert (
        llm.generate(prompt, sampled)[0].token_ids == plain.generate(prompt, sampled)[0].token_ids
    )
    # the answers are saved with the memory: a new LLM replays them too
    path = tmp_path / "memory.npz"
    llm.save_memory(str(path))
    restarted = LLM(model, dtype="float32", plugin_params=HYBRID)
    restarted.load_memory(str(path))
    out = restarted.generate(prompt, PARAMS)[0]
    assert out.token_ids == first.token_ids and out.stats["decode_steps"] == 1


def test_answers_replay_only_to_requests_whose_parameters_write_them_again(model):
    prompt = "a prompt asked greedily, sampled and with a penalty"
    plain = LLM(model, dtype="float32")
    llm = LLM(model, dtype="float32", plugin_params=HYBRID)
    first = llm.generate(prompt, PARAMS)[0]
    drawn = SamplingParams(max_tokens=40, temperature=1.0, ignore_eos=True)
    for _ in range(3):  # draws: matched later, never kept as answers to replay
        llm.generate(prompt, drawn)
    memory = llm.drafter.output_memory
    assert len(memory.answer(first.prompt_token_ids)) == 1 and len(memory.answers) == 1
    again = llm.generate(prompt, PARAMS)[0]  # the greedy answer alone, whole: one step
    assert again.token_ids == first.token_ids and again.stats["decode_steps"] == 1
    # a penalty writes other tokens: the greedy answer is not its replay, its own answer is
    penalised = SamplingParams(
        max_tokens=40, temperature=0.0, repetition_penalty=1.3, ignore_eos=True
    )
    reference = plain.generate(prompt, penalised)[0].token_ids
    once = llm.generate(prompt, penalised)[0]
    twice = llm.generate(prompt, penalised)[0]
    assert once.token_ids == twice.token_ids == reference != first.token_ids
    assert twice.stats["decode_steps"] == 1 < once.stats["decode_steps"]
    # a seeded sample writes its answer again: replayed from the first step
    seeded = SamplingParams(max_tokens=40, temperature=1.0, seed=11, ignore_eos=True)
    s1, s2 = llm.generate(prompt, seeded)[0], llm.generate(prompt, seeded)[0]
    assert s1.token_ids == s2.token_ids == plain.generate(prompt, seeded)[0].token_ids
    assert s2.stats["decode_steps"] == 1 < s1.stats["decode_steps"]
