"""The decode-mode seam (decoding/contract/mode.py): the engine names no mode (ASPD plugs in from
outside), and a mode written here, knowing only the seam, drives draws, runs steps itself,
ends accepted runs and reports its figures through the engine."""

import ast
from pathlib import Path

import pytest

from drafters import OracleDrafter
from paraspec import LLM, SamplingParams
from paraspec.aspd.decode import AspdDecoder
from paraspec.decoding.contract.mode import ModePlugin
from paraspec.sequence import sequence_stats
from paraspec.decoding.contract.verify import build_query
from paraspec.errors import RequestError
from paraspec.model.tokenizer import IncrementalDetokenizer

SRC = Path(__file__).resolve().parents[2] / "src" / "paraspec"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_engine_and_sequence_name_no_mode():
    for name in (
        "engine.py",
        "sequence.py",
        "decoding/contract/mode.py",
        "decoding/contract/stats.py",
    ):
        assert not any("aspd" in m for m in _imports(SRC / name)), name
    for name in ("engine.py", "sequence.py", "decoding/contract/stats.py"):
        assert "aspd" not in (SRC / name).read_text().lower(), name
    assert issubclass(AspdDecoder, ModePlugin)


class Toy:
    """One sequence of ToyMode: bans one token on every draw, optionally runs every step itself
    (plain autoregressive steps built from the seam alone), and ends accepted runs after `stop_at`."""

    def __init__(self, plugin: "ToyMode", tokenizer):
        self.plugin, self.tokenizer = plugin, tokenizer
        self.draws = self.own_steps = 0

    def detokenizer(self):
        return IncrementalDetokenizer(self.tokenizer)

    def draw(self, seq, logits, pending):
        self.draws += 1
        logits = logits.clone()
        if self.plugin.ban is not None:
            logits[self.plugin.ban] = float("-inf")
        return seq.sampler.draw(logits)

    def ends_run(self, token):
        return token == self.plugin.stop_at

    def query(self, seq, ctx):
        return (
            build_query(seq.tokens[-1], seq.cache.length, None) if self.plugin.run_steps else None
        )

    def accept(self, seq, q, logits, forward_s):
        t = self.draw(seq, logits[0], [])
        seq.sampler.append(t)
        seq.cache.commit([0])
        seq.stats.observe_step(0, 1, 0.0, forward_s)
        self.own_steps += 1
        return [t]

    def stats(self, seq):
        return {"toy_draws": self.draws, "toy_steps": self.own_steps}


class ToyMode(ModePlugin):
    name = "toy"

    def __init__(self, ban=None, run_steps=False, stop_at=None, drafter=None):
        self.ban, self.run_steps, self.stop_at, self.drafter = ban, run_steps, stop_at, drafter

    def new_sequence(self, tokenizer, params):
        if params.n > 1:
            raise RequestError("toy mode: one sample per request")
        return Toy(self, tokenizer)


PROMPT = "The quick brown fox"
PARAMS = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    return LLM(
        str(tiny_model_dir("llama", n_layers=2, hidden=64, heads=4, kv_heads=2)), dtype="float32"
    )


def _gen(llm, plugin):
    """(output, stats, the token runs of each update) of PROMPT through the engine with `plugin`."""
    seq = llm.engine.add_request(llm.tokenizer.encode(PROMPT), PARAMS, drafter=plugin)[0]
    runs = []
    llm.engine.run_until_done(lambda u: runs.append(u.new_token_ids))
    return seq, sequence_stats(seq), runs


def test_a_mode_that_runs_every_step_equals_plain_decoding(llm):
    plain = llm.generate(PROMPT, PARAMS)[0]
    seq, stats, _ = _gen(llm, ToyMode(run_steps=True))
    assert seq.output == plain.token_ids and seq.text == plain.text
    assert stats["toy_steps"] == stats["decode_steps"] == len(seq.output) - 1
    assert stats["toy_draws"] == len(seq.output)  # the first token too


def test_mode_draws_apply_in_the_engines_own_steps_with_drafts(llm):
    plain = llm.generate(PROMPT, PARAMS)[0].token_ids
    i = next(i for i in range(1, len(plain)) if plain[i] not in plain[:i])
    ban = plain[i]
    own, _, _ = _gen(llm, ToyMode(ban=ban, run_steps=True))
    assert own.output[:i] == plain[:i] and ban not in own.output
    # the engine's steps with an oracle drafter proposing the banned answer: the same tokens
    ref = llm.tokenizer.encode(PROMPT) + own.output
    drafted, stats, runs = _gen(
        llm, ToyMode(ban=ban, drafter=OracleDrafter(ref, llm.model.args.vocab_size))
    )
    assert drafted.output == own.output and stats["decode_steps"] < len(own.output) - 1
    assert stats["toy_draws"] == len(own.output) and stats["toy_steps"] == 0
    # ends_run: no accepted run goes on past the mode's token
    stop_at = own.output[len(own.output) // 2]
    cut, _, runs = _gen(
        llm,
        ToyMode(ban=ban, stop_at=stop_at, drafter=OracleDrafter(ref, llm.model.args.vocab_size)),
    )
    assert cut.output == own.output
    assert all(stop_at not in r[:-1] for r in runs) and any(r[-1:] == [stop_at] for r in runs)


def test_a_mode_may_refuse_a_request(llm):
    with pytest.raises(RequestError, match="toy mode"):
        llm.engine.add_request(
            llm.tokenizer.encode(PROMPT), SamplingParams(n=2, max_tokens=4), drafter=ToyMode()
        )
    assert not llm.engine.has_work()
