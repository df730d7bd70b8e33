"""MemoryDrafter (memory_decoding): parameters, draft validity, memory, stop tokens, back-off."""

from __future__ import annotations

import json
import random
import warnings

import pytest

from paraspec.config import parse_plugin_params
from hypothesis import given, settings, strategies as st

from drafters import WithContext
from paraspec.decoding.drafters import unknown_keys
from paraspec.decoding.drafters.memory_decoding import MemoryDecodingParams, MemoryDrafter
from paraspec.decoding.policy.cost import CostModel
from paraspec.decoding.contract.tree import DraftTree
from paraspec.decoding.memory.trie import TokenTrie
from paraspec.errors import ConfigError
from paraspec.tools.replay import Record, replay

EOS = 2
FLAT_COST = {1: 1.0, 16: 1.0}  # verification is free: back-off never needed
# a steep curve (SmolLM2-135M fp32 on a 2-core CPU): drafts must earn their rows
STEEP_COST = CostModel({1: 1.0, 2: 1.19, 4: 1.19, 8: 1.23, 16: 1.66, 32: 2.51})


def drafter(**kw) -> MemoryDrafter:
    return WithContext(MemoryDrafter(MemoryDecodingParams(**kw), eos_token_ids=[EOS]), FLAT_COST)


def generate(
    d: MemoryDrafter, rid: str, prompt: list[int], output: list[int], max_nodes: int = 15
) -> list[DraftTree]:
    """Greedy replay of one request: accept the longest draft path the output follows."""
    d.begin(rid, prompt)
    context, pos, drafts = list(prompt) + output[:1], 1, []
    while pos < len(output):
        draft = d.propose(rid, context, max_nodes).draft
        drafts.append(draft)
        children, row, n = draft.children(), 0, 0
        while pos + n < len(output) and output[pos + n] in children[row]:
            row = children[row][output[pos + n]] + 1
            n += 1
        committed = output[pos : pos + n + 1]
        d.observe(rid, committed)
        context += committed
        pos += len(committed)
    d.end(rid)
    return drafts


# ------------------------------------------------------------------------------ parameters
def test_mindie_plugin_params_parse():
    p = parse_plugin_params(
        '{"plugin_type":"memory_decoding","decoding_length":16,"dynamic_algo":true}'
    ).params
    assert (p.decoding_length, p.dynamic_algo, p.max_draft) == (16, True, 15)
    d = MemoryDecodingParams()
    assert (d.decoding_length, d.dynamic_algo, d.mode) == (16, False, "tree")


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            {"decoding_length": 20},
            r"plugin_params.decoding_length=20 is outside \[1, 16\]; pass a value from 1 to 16",
        ),
        ({"decoding_length": 0}, r"decoding_length=0 is outside \[1, 16\]"),
        ({"mode": "beam"}, r"plugin_params.mode='beam'"),
        ({"branch_length": 0}, r"branch_length=0 is outside"),
        ({"max_trie_nodes": 10}, r"max_trie_nodes=10 is below 1024"),
        ({"plugin_type": "la"}, r"plugin_type='la' is not memory_decoding"),
    ],
)
def test_invalid_values_name_field_range_and_fix(bad, message):
    with pytest.raises(ConfigError, match=message):
        MemoryDecodingParams.from_dict(bad).validate()


@pytest.mark.parametrize(
    "bad",
    [
        {"decoding_length": "16"},
        {"decoding_length": True},
        {"decoding_length": 8.0},
        {"dynamic_algo": 1},
        {"dynamic_algo": "true"},
        {"mode": None},
    ],
)
def test_wrong_types_are_rejected(bad):
    key = next(iter(bad))
    with pytest.raises(ConfigError, match=rf"plugin_params.{key}=.* pass a JSON"):
        MemoryDecodingParams.from_dict(bad)


def test_unknown_keys_warn_and_are_ignored():
    unknown_keys.forget()
    with pytest.warns(UserWarning, match="unknown key 'maxIterTimes'"):
        p = MemoryDecodingParams.from_dict({"maxIterTimes": 4096, "decoding_length": 8})
    assert p.decoding_length == 8


@pytest.mark.parametrize("text", ["{decoding_length: 16}", "[16]"])
def test_bad_json_is_a_config_error(text):
    with pytest.raises(ConfigError, match="plugin_params"):
        parse_plugin_params(text)


def test_speculation_gamma_must_cover_decoding_length():
    p = MemoryDecodingParams(decoding_length=16)
    with pytest.raises(
        ConfigError,
        match="speculation_gamma=8 is smaller than plugin_params"
        ".decoding_length=16; set speculation_gamma to at least 16",
    ):
        p.validate(speculation_gamma=8)
    assert p.validate(speculation_gamma=16) is p
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MemoryDecodingParams.from_dict({"plugin_type": "memory_decoding"}).validate(None)


# ------------------------------------------------------------------------------ drafts
@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(3, 9), min_size=1, max_size=60),
    st.lists(st.integers(3, 9), min_size=1, max_size=60),
    st.integers(1, 16),
    st.integers(0, 20),
    st.sampled_from(["tree", "chain"]),
    st.booleans(),
)
def test_every_draft_is_a_valid_tree_within_budget(
    prompt, output, decoding_length, max_nodes, mode, dynamic
):
    d = drafter(decoding_length=decoding_length, mode=mode, dynamic_algo=dynamic, copy_length=0)
    for draft in generate(d, "r", prompt, output, max_nodes):
        assert len(draft) <= min(max_nodes, decoding_length - 1)  # root + drafts <= decoding_length
        assert all(-1 <= p < i for i, p in enumerate(draft.parents))
        assert mode == "tree" or draft.is_chain()
        assert EOS not in draft.tokens


@pytest.mark.parametrize("mode", ["tree", "chain"])
def test_long_copies_draft_past_decoding_length_where_rows_are_free(mode):
    """While the output copies a long span of the prompt, the chain goes on past branch_length
    and, on a flat cost curve, past decoding_length - 1 (up to copy_length more); with
    copy_length=0 it never does."""
    rng = random.Random(1)
    span = [rng.randrange(100, 5000) for _ in range(120)]
    prompt = [rng.randrange(100, 5000) for _ in range(30)] + span
    longest = {}
    for copy_length in (0, 32):
        d = drafter(mode=mode, copy_length=copy_length)
        longest[copy_length] = max(len(x) for x in generate(d, "r", prompt, span[:100], 64))
    assert longest[0] <= 15 < longest[32] <= 15 + 32


@pytest.mark.parametrize("mode", ["tree", "chain"])
def test_the_true_continuation_is_proposed(mode):
    """Draft = the true continuation => it is proposed, and every token of it accepted."""
    rng = random.Random(0)
    span = [rng.randrange(100, 5000) for _ in range(60)]  # distinct tokens: one continuation
    prompt = [rng.randrange(100, 5000) for _ in range(50)] + span + [7, 8]
    truth = span + [7, 8]
    d = drafter(mode=mode)
    d.begin("r", prompt)
    for i in range(2, len(span)):
        draft = d.propose("r", [1] + span[:i], 15).draft
        deepest = max(range(len(draft)), key=lambda j: len(draft.path_to(j)))
        assert [draft.tokens[j] for j in draft.path_to(deepest)] == truth[i : i + 15], i
    d.end("r")
    steps = generate(drafter(mode=mode), "r2", prompt, [1] + span)
    # the prefill commits 1 (unseen: nothing to draft), a plain step span[0], then 15 drafts +
    # 1 bonus a step; the last draft is all the prompt has left: span[49:] + [7, 8]
    assert [len(x) for x in steps] == [0, 15, 15, 15, 13]


def test_output_memory_carries_across_requests_and_prompts_do_not():
    rng = random.Random(1)
    answer = [rng.randrange(100, 5000) for _ in range(80)]
    secret = [rng.randrange(6000, 9000) for _ in range(40)]
    d = drafter()
    first = generate(d, "a", secret + [5, 6], answer)
    second = generate(d, "b", [5, 6, 7], answer)  # the same answer again, other prompt
    assert len(second) <= 6 < len(first)
    d.begin("c", [5, 6])
    assert d.propose("c", [5, 6] + secret[:2], 15).draft.tokens == []  # a's prompt was private
    d.end("c")
    assert d.trie.stats().active_prompts == 0


def test_stop_tokens_are_never_stored_or_drafted():
    d = drafter(mode="chain")
    d.begin("r", [10, 11, 12, EOS, 13, 14, EOS, 10, 11])
    draft = d.propose("r", [10, 11], 15).draft
    assert EOS not in draft.tokens and draft.tokens[:1] == [12]
    d.observe("r", [12, 40, 41, EOS, 42, 43])  # tokens after EOS are dropped too
    d.observe("r", [44])
    assert d.propose("r", [10, 11, 12, 40, 41, EOS], 15).draft.tokens == []  # EOS is no root
    d.end("r")
    nodes = d.trie.nodes
    live = [nodes.tok[n] for n in range(1, len(nodes.tok)) if nodes.parent[n] >= 0]
    assert EOS not in live and 40 in live and not {42, 43, 44} & set(live)


def test_prefill_token_is_picked_up_without_observe():
    d = drafter(mode="chain")
    d.begin("r", [20, 21])
    d.propose("r", [20, 21, 22], 15)  # 22 came from the prefill
    d.observe("r", [23])
    d.end("r")
    d.begin("s", [1])
    assert d.propose("s", [1, 21, 22], 15).draft.tokens[:1] == [23]


def test_decoding_length_one_is_plain_decoding():
    d = drafter(decoding_length=1)
    assert all(len(x) == 0 for x in generate(d, "r", [5, 6, 7] * 10, [5, 6, 7] * 10))


def test_unknown_request_is_an_error():
    with pytest.raises(KeyError, match="call begin"):
        drafter().propose("nope", [1, 2], 4)


def test_batch_size_caps_dynamic_drafts():
    d = drafter(dynamic_algo=True)
    seq = list(range(100, 140)) * 3
    d.set_batch_size(8)
    assert max(len(x) for x in generate(d, "a", seq, seq)) == 7
    d.set_batch_size(32)
    assert max(len(x) for x in generate(d, "b", seq, seq)) == 3
    d.set_batch_size(1)
    assert max(len(x) for x in generate(d, "c", seq, seq)) == 15


def test_shared_trie_is_used():
    trie = TokenTrie(max_nodes=4096, window=18)
    trie.insert([11, 12, 13, 14, 15])
    d = WithContext(
        MemoryDrafter(MemoryDecodingParams(), eos_token_ids=[EOS], trie=trie), FLAT_COST
    )
    d.begin("r", [9])
    assert d.propose("r", [9, 11, 12], 15).draft.tokens[:3] == [13, 14, 15]


# ------------------------------------------------------------------------------ back-off (replay)
def records(kind: str, n: int, seed: int = 0) -> list[Record]:
    rng = random.Random(seed)
    recs = []
    for _ in range(n):
        prompt = [rng.randrange(3, 3000) for _ in range(300)]
        if kind == "copy":  # the answer quotes two spans of the prompt
            a, b = rng.randrange(0, 100), rng.randrange(150, 250)
            output = (
                prompt[a : a + 40] + [rng.randrange(3, 3000) for _ in range(5)] + prompt[b : b + 40]
            )
        else:  # common tokens, nothing to copy: drafts are mostly wrong
            output = [rng.randrange(3, 60) for _ in range(150)]
            prompt = [rng.randrange(3, 60) for _ in range(300)]
        recs.append(Record(prompt, output))
    return recs


class DraftSizes:
    """A drafter's proposals as they are sent: the size of each step's draft, in order."""

    def __init__(self, drafter: MemoryDrafter):
        self.drafter, self.sizes = drafter, []

    def __getattr__(self, name):
        return getattr(self.drafter, name)

    def propose(self, *args, **kwargs):
        proposal = self.drafter.propose(*args, **kwargs)
        self.sizes.append(len(proposal.draft))
        return proposal


def forward_speedup(rep) -> float:
    """Plain decoding's forward cost over the run's, both priced by the replay's cost curve: counts
    of rows, not seconds (the drafter's CPU time is benchmarks/drafting_overhead.py's business)."""
    return rep.tokens / rep.cost


@pytest.mark.parametrize("dynamic", [False, True])
def test_wrong_drafts_back_off_to_plain_decoding(dynamic):
    d = DraftSizes(MemoryDrafter(MemoryDecodingParams(dynamic_algo=dynamic), eos_token_ids=[EOS]))
    rep = replay(d, records("noise", 6), 15, STEEP_COST)
    assert rep.accepted / max(rep.drafted, 1) < 0.1  # the memory is indeed wrong here
    # once its first drafts have failed, the drafter stops paying for rows: past the first quarter
    # of the steps (under two requests) hardly a step verifies a draft, and few rows are spent
    late = d.sizes[len(d.sizes) // 4 :]
    assert sum(1 for n in late if n) <= len(late) // 100
    assert rep.drafted <= rep.steps // 20
    assert forward_speedup(rep) >= 0.99


def test_the_same_wrong_memory_is_drafted_where_rows_are_free():
    """The back-off above is the drafter's choice under a steep curve, not a memory that offers
    nothing: with free rows the same records draft on most steps."""
    d = DraftSizes(MemoryDrafter(MemoryDecodingParams(), eos_token_ids=[EOS]))
    rep = replay(d, records("noise", 6), 15, CostModel(FLAT_COST))
    assert sum(1 for n in d.sizes if n) > rep.steps // 5 and rep.drafted > 5 * rep.steps


@pytest.mark.parametrize("mode", ["tree", "chain"])
def test_copying_is_fast(mode):
    d = MemoryDrafter(MemoryDecodingParams(mode=mode), eos_token_ids=[EOS])
    rep = replay(d, records("copy", 6), 15, STEEP_COST)
    assert rep.tokens_per_step > 4 and forward_speedup(rep) > 2.5


def test_tree_accepts_at_least_as_much_as_chain():
    recs = records("noise", 4, seed=3) + records("copy", 4, seed=3)
    got = {}
    for mode in ("tree", "chain"):
        d = MemoryDrafter(MemoryDecodingParams(mode=mode), eos_token_ids=[EOS])
        got[mode] = replay(d, recs, 15, CostModel(FLAT_COST)).tokens_per_step
    assert got["tree"] >= got["chain"]


def test_replay_report_is_json_ready():
    d = drafter()
    summary = replay(d, records("copy", 1), 15, d.cost).summary()
    assert json.loads(json.dumps(summary))["tokens_per_step"] > 1


def test_unknown_key_warnings_are_bounded(recwarn):
    """A fresh huge key per request (1 MiB names) warns once per name, truncated, and stops
    remembering names past MAX_NAMES: the log and the warnings registry stay bounded."""
    unknown_keys.forget()
    for i in range(unknown_keys.MAX_NAMES + 50):
        MemoryDecodingParams.from_dict({f"k{i}" + "x" * 100_000: 1})
    MemoryDecodingParams.from_dict({"k0" + "x" * 100_000: 1})  # the same name again
    texts = [str(w.message) for w in recwarn if "unknown key" in str(w.message)]
    assert len(texts) == unknown_keys.MAX_NAMES
    assert max(map(len, texts)) < 400
    unknown_keys.forget()
