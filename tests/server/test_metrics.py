"""/metrics' forward-cost gauges and no-draft counter, read from a real engine (no server)."""

from prometheus_client.parser import text_string_to_metric_families

from paraspec import LLM
from paraspec.decoding.policy.cost import CostModel
from paraspec.server.metrics import ServingMetrics
from paraspec.sequence import SequenceUpdate


def families(metrics: ServingMetrics) -> dict:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def test_the_cost_curve_and_its_age_are_exported_once_probed(tiny_model_dir):
    llm = LLM(str(tiny_model_dir("llama")), dtype="float32")  # no drafter: nothing probed yet
    metrics = ServingMetrics("tiny")
    metrics.watch_cost(lambda: llm.engine.cost_info(measure=False))
    assert "paraspec_forward_cost" not in families(metrics)  # a scrape never runs the probe
    llm.engine.cost  # the probe, as a drafting engine's start
    f = families(metrics)
    curve = {s.labels["rows"]: s.value for s in f["paraspec_forward_cost"].samples}
    assert curve["1"] == 1.0 and {"2", "4", "8", "16", "32"} <= set(curve)
    assert all(
        curve[a] <= curve[b]
        for a, b in zip(("1", "2", "4", "8", "16"), ("2", "4", "8", "16", "32"))
    )
    assert f["paraspec_forward_cost_age_seconds"].samples[0].value >= 0.0
    assert f["paraspec_forward_cost_samples"].samples[0].value == 0
    assert f["paraspec_forward_cost_pinned"].samples[0].value == 0
    # set by hand: pinned
    llm.engine.pin_cost(CostModel({1: 1.0, 2: 2.08, 4: 3.04, 8: 6.08, 16: 11.16, 32: 20.26}))
    f = families(metrics)
    assert {s.labels["rows"]: s.value for s in f["paraspec_forward_cost"].samples}["16"] == 11.16
    assert f["paraspec_forward_cost_pinned"].samples[0].value == 1


def test_no_draft_steps_are_counted_by_reason():
    metrics = ServingMetrics("tiny")
    update = SequenceUpdate(None, [1], "a", None, True)
    metrics.observe_update(
        update, True, {"generated_tokens": 1, "no_draft_steps": {"rows_too_dear": 7, "no_match": 2}}
    )
    f = families(metrics)
    steps = {
        s.labels["reason"]: s.value
        for s in f["paraspec_no_draft_steps"].samples
        if s.name.endswith("_total")
    }
    assert steps == {"rows_too_dear": 7.0, "no_match": 2.0}
