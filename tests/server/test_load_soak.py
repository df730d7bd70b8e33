"""benchmarks/load_soak.py in short: its own entry point starts the real `paraspec serve` (the tiny
model, memory_decoding on), two users replay ShareGPT-format conversations with the official
openai client, streamed and whole, one request of each user closed mid-stream, and the run keeps
its rule: no 5xx, no hang, every completed answer equal to the same request sent alone, the
server idle, healthy and exact after, exit 0 on SIGTERM. Beside it, the pieces the long run's
figures rest on: which turns and history a user sends, the shares, the RSS slope."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

# by its path: benchmarks/ on sys.path would shadow the kernels package (benchmarks/kernels.py)
_spec = importlib.util.spec_from_file_location(
    "load_soak", Path(__file__).resolve().parents[2] / "benchmarks" / "load_soak.py"
)
sys.modules["load_soak"] = load_soak = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(load_soak)
users = load_soak.users


def _chat(cid: str, *turns: str) -> dict:
    return {
        "id": cid,
        "conversations": [
            {"from": "human" if i % 2 == 0 else "gpt", "value": t} for i, t in enumerate(turns)
        ],
    }


CONVERSATIONS = [  # ShareGPT's layout: "<chat>_<piece>" ids, human / gpt turns
    _chat(
        "a_0",
        "Name a prime number.",
        "Seven is prime.",
        "And an even one?",
        "Two.",
        "Why is it prime?",
        "Its only divisors are one and itself.",
    ),
    _chat(
        "b_0",
        "Write a haiku about rain.",
        "Soft rain on the roof, a kettle hums in the dark.",
        "Now one about snow.",
        "White hush on the hills.",
    ),
    _chat(
        "c_3",
        "def add(a, b):",
        "    return a + b",
        "Add type hints.",
        "def add(a: int, b: int) -> int:",
    ),
]


def test_a_short_load_run_keeps_the_rule(model_dir, tmp_path):
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps(CONVERSATIONS))
    out = tmp_path / "out"
    code = load_soak.main(
        [
            "--model",
            str(model_dir),
            "--dtype",
            "float32",
            "--threads",
            "1",
            "--systems",
            "paraspec-md",
            "--clients",
            "2",
            "--requests",
            "4",
            "--duration",
            "0",
            "--cancel-share",
            "0.25",
            "--stream-share",
            "0.5",
            "--max-tokens",
            "24",
            "--context",
            "512",
            "--prompt-chars",
            "300",
            "--data",
            str(data),
            "--exact-sample",
            "0",
            "--timeout",
            "120",
            "--rss-every",
            "0.2",
            "--out",
            str(out),
        ]
    )
    (level,) = json.loads((out / "results.json").read_text())["levels"]
    assert level["problems"] == [] and code == 0
    r = level["result"]
    outcomes = r["outcomes"]
    assert r["requests"] == 8 and set(outcomes) <= {"ok", "cancelled"}, r
    assert outcomes.get("cancelled", 0) >= 1, r  # a user closed a stream mid-answer
    assert r["exact"] == {"checked": outcomes["ok"], "mismatches": 0}
    assert r["streamed"] >= 4 and r["ttft_p50_s"] is not None and r["tokens"] > 0
    assert r["rss"]["samples"] >= 1 and r["rss"]["start_mb"] > 0
    assert "| paraspec-md | 2 | 8 |" in (out / "report.md").read_text()


def test_a_user_sends_each_turn_after_the_data_s_own_history():
    msgs = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": c}
        for i, c in enumerate(["q1", "a1", "q2", "a2" * 10, "q3"])
    ]
    turns = users.turns_of("x", msgs, prompt_chars=25, max_tokens=32)
    # 1st dropped
    assert [t.messages for t in turns] == [
        tuple(msgs[:1]),
        tuple(msgs[:3]),
        tuple(msgs[2:5]),
    ]
    assert [t.index for t in turns] == [0, 1, 2] and turns[2].max_tokens == 32


@pytest.mark.parametrize("share", [0.1, 0.25, 0.5])
def test_streams_and_cancels_take_their_share_of_any_run(share):
    convs = [
        [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
        for i in range(7)
    ]
    plan = users.Plan(convs, 100, 16, stream_share=share, cancel_share=share, seed=3)
    n = 400
    for client in range(3):
        picks = [p for p, _ in zip(plan.requests(client, 3), range(n))]
        cancelled = sum(c is not None for _, _, c in picks)
        assert abs(cancelled - n * share) < 1 and all(s for _, s, c in picks if c is not None)
        assert abs(sum(s for _, s, c in picks if c is None) - (n - cancelled) * share) < 1
        assert {t.conversation for t, _, _ in picks[:3]} == {
            str(client % 7),
            str((client + 3) % 7),
            str((client + 6) % 7),
        }


def test_the_rss_slope_is_the_least_squares_line_after_the_warm_up():
    mib = 2**20
    samples = [(t, 500 * mib if t < 10 else (500 + (t - 10) / 30) * mib) for t in range(0, 101, 5)]
    rss = users.rss_figures(samples, warmup_s=10)
    assert (
        rss["slope_mb_per_min"] == pytest.approx(2.0)
        and rss["start_mb"] == 500.0
        and rss["samples"] == 21
    )
    # too few
    assert users.rss_figures([(0, mib), (1, 2 * mib)], warmup_s=0)["slope_mb_per_min"] is None
