"""bench/markdown: what report.md says, from hand-written results (see conftest.hand_results)."""

from __future__ import annotations

from pathlib import Path

from paraspec.bench.aggregate import summarize
from paraspec.bench.markdown import markdown


def render(results: dict, figures: dict | None = None) -> str:
    return markdown(results, summarize(results), figures or {})


def test_the_method_the_systems_and_a_table_per_set(hand_results):
    md = render(hand_results)
    assert md.startswith("# paraspec bench\n") and "--quick" not in md.splitlines()[0]
    assert "**Memory (trie): pre-filled: no.**" in md and "commit `abc`" in md
    assert "| llamacpp | peer | llamacpp | skipped: llama-cpp-python is not installed |" in md
    assert "## Greedy: speedup vs paraspec AR (median over tasks)" in md
    assert "| md-tree | 2.50x |" in md
    assert "### grounded (greedy)" in md
    assert "| md-tree | 2 | 25.0 | **2.50x** (2.00-3.00) | 2.00 | 0.62 |" in md
    assert (
        "| ar | 2 | 10.0 | 1 (baseline) |" in md
        and "| hf | 2 | 10.0 | **1.00x** (0.80-1.20) |" in md
    )
    assert "2/2 |" in md and "50 % prefix |" in md


def test_targets_ttft_and_no_failure_notes(hand_results):
    md = render(hand_results)
    assert "## Targets from the issues" in md
    assert "| memory_decoding >= 2.5x on grounded (median) | md-tree | 2.50x | pass |" in md
    assert (
        "## TTFT on a 100-token prompt (trie insertion at prefill)" in md
        and "| md-tree | 1.020 (+2.0 %) |" in md
    )
    assert "## Notes" not in md and "Sampled" not in md


def test_a_quick_run_says_it_is_not_evidence(hand_results):
    hand_results["config"]["quick"] = True
    md = render(hand_results)
    assert md.splitlines()[0] == "# paraspec bench (--quick: a smoke run, not evidence)"
    assert "these verdicts are not evidence" in md


def test_lossless_failures_and_notes_are_listed(hand_results):
    next(m for m in hand_results["measurements"] if m["system"] == "md-tree")["token_ids"] = [9]
    hand_results["notes"] = ["main: stopped at the --quick time budget"]
    md = render(hand_results)
    assert (
        "## Notes\n\n- main: stopped at the --quick time budget\n"
        "- LOSSLESSNESS FAILURE: md-tree differs from AR on main/grounded/t/0" in md
    )


def test_figures_are_linked_by_file_name(hand_results):
    md = render(
        hand_results,
        {"speedup": Path("/out/speedup.png"), "accept_hist": Path("/out/accept_hist.png")},
    )
    assert "![speedup per task set and system](speedup.png)" in md
    assert "![accepted tokens per step](accept_hist.png)" in md


def test_serving_table(hand_results):
    hand_results["serving"] = {
        "requests": 4,
        "task_set": "grounded",
        "max_tokens": 64,
        "plugin_params": {},
        "runs": [
            {"system": "paraspec-ar", "concurrency": 1, "tokens_per_s": 40.0, "texts": ["a"]},
            {"system": "paraspec-md", "concurrency": 1, "tokens_per_s": 80.0, "texts": ["a"]},
        ],
    }
    md = render(hand_results)
    assert "| 1 | 40.0 | 80.0 | 2.00x | True |" in md


def test_a_peer_says_what_its_drafts_start_from(hand_results):
    """llama-server's n-gram modes restart before every run: the memory column says cold, not '-'."""
    hand_results["systems"]["llamacpp"]["memory"] = "cold (restarted per run)"
    assert "| skipped: llama-cpp-python is not installed | cold (restarted per run) |" in render(
        hand_results
    )
