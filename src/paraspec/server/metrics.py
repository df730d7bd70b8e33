"""Prometheus collectors of one server, in a private CollectorRegistry (several apps can share a process).

Fed by the engine loop thread from SequenceUpdates and the sequences' SpecStats (prometheus_client
is thread-safe); read by GET /metrics. Convention (as in SpecStats): "accepted tokens per step"
counts every token one decode step emits for a sequence, accepted drafts plus the bonus token, so
plain decoding scores exactly 1.
"""

from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..sequence import SequenceUpdate

PREFIX = "paraspec"
_LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
)
_TPOT_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.04,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    1.0,
    2.5,
)
_ACCEPTED_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 64)


class _CostCollector:
    """The forward-cost curve drafts are priced by, read at scrape time (its age is then's)."""

    def __init__(self, source: Callable[[], dict | None]):
        self.source = source

    def describe(self):
        return []  # nothing collected at registration: the engine may not have probed yet

    def collect(self):
        info = self.source()
        if not info:
            return
        curve = GaugeMetricFamily(
            f"{PREFIX}_forward_cost",
            "t(k)/t(1): a forward of k query rows over one "
            "row's, as drafts are priced now (probed, refreshed by the engine's own steps)",
            labels=["rows"],
        )
        for k, v in info.get("t_k_over_t_1", {}).items():
            curve.add_metric([str(k)], float(v))
        yield curve
        yield GaugeMetricFamily(
            f"{PREFIX}_forward_cost_age_seconds",
            "Seconds since the forward-cost curve was probed or last refreshed",
            value=float(info.get("age_s", 0.0)),
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_forward_cost_samples",
            "Paired steps (k rows against one row at equal context) that refreshed the curve",
            value=float(info.get("samples", 0)),
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_forward_cost_refreshes",
            "Times the curve was refreshed",
            value=float(info.get("refreshes", 0)),
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_forward_cost_pinned",
            "1 where the curve is pinned (PARASPEC_FORWARD_COST or set by hand): never refreshed",
            value=float(bool(info.get("pinned"))),
        )


class _PrefixCacheCollector:
    """The prefix cache's counters (PrefixCache.info), read at scrape time from the engine's cache."""

    def __init__(self, source: Callable[[], dict]):
        self.source = source

    def describe(self):
        return []

    def collect(self):
        info = self.source()
        for key, what in (
            ("lookups", "Prefills that looked for cached prompt chunks"),
            ("hits", "Prefills that started from cached prompt chunks"),
            ("misses", "Prefills that found no cached prompt chunk"),
            ("reused_tokens", "Prompt tokens whose KV was copied, not prefilled"),
            ("evicted_blocks", "Cached chunks evicted under the budget"),
        ):
            yield CounterMetricFamily(f"{PREFIX}_prefix_cache_{key}", what, value=float(info[key]))
        yield GaugeMetricFamily(
            f"{PREFIX}_prefix_cache_blocks", "Prompt chunks cached", value=float(info["blocks"])
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_prefix_cache_bytes", "Bytes of KV cached", value=float(info["bytes"])
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_prefix_cache_budget_bytes",
            "The cache's budget (0: off)",
            value=float(info["budget_bytes"]),
        )


class ServingMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model_name: str, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r, p = self.registry, PREFIX
        self.requests = Counter(
            f"{p}_requests",
            "Engine requests by outcome (finished, aborted, timeout, "
            "error: the server's, invalid_request: the client's, rejected: at capacity, "
            "shutdown: cut by it)",
            ["outcome"],
            registry=r,
        )
        self.prompt_tokens = Counter(f"{p}_prompt_tokens", "Prompt tokens prefilled", registry=r)
        self.generation_tokens = Counter(f"{p}_generation_tokens", "Tokens generated", registry=r)
        self.decode_steps = Counter(
            f"{p}_decode_steps", "Batched decode steps (one forward each)", registry=r
        )
        self.draft_tokens = Counter(
            f"{p}_draft_tokens", "Draft tokens verified (finished sequences)", registry=r
        )
        self.accepted_draft_tokens = Counter(
            f"{p}_accepted_draft_tokens", "Draft tokens accepted (finished sequences)", registry=r
        )
        self.no_draft_steps = Counter(
            f"{p}_no_draft_steps",
            "Decode steps of a drafting sequence that verified "
            "no draft, by why (gate_closed, no_match, rows_too_dear, no_room; finished "
            "sequences)",
            ["reason"],
            registry=r,
        )
        self.accepted_per_step = Histogram(
            f"{p}_accepted_tokens_per_step",
            "Tokens one decode step emitted for one sequence (drafts + bonus)",
            buckets=_ACCEPTED_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            f"{p}_time_to_first_token_seconds",
            "From submission to the first token",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            f"{p}_time_per_output_token_seconds",
            "Decode time per token after the first, per finished sequence",
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        self.e2e_latency = Histogram(
            f"{p}_e2e_request_latency_seconds",
            "From submission to the last token",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_length = Gauge(
            f"{p}_queue_length", "Requests waiting for a batch slot", registry=r
        )
        self.running = Gauge(f"{p}_running_sequences", "Sequences in the decode batch", registry=r)
        self.in_flight = Gauge(
            f"{p}_requests_in_flight", "Requests held by the server (running + queued)", registry=r
        )
        self.trie_nodes = Gauge(
            f"{p}_trie_nodes", "Nodes in memory_decoding's shared token trie", registry=r
        )
        info = Gauge(f"{p}_model_info", "The served model", ["model"], registry=r)
        info.labels(model_name).set(1)

    def observe_update(
        self, update: SequenceUpdate, decode_step: bool, final_stats: dict | None
    ) -> None:
        """One sequence's output of one engine step; final_stats (sequence_stats) when it finished."""
        n = len(update.new_token_ids)
        self.generation_tokens.inc(n)
        if decode_step and n:
            self.accepted_per_step.observe(n)
        if final_stats is not None:
            self.draft_tokens.inc(final_stats.get("draft_tokens", 0))
            self.accepted_draft_tokens.inc(final_stats.get("accepted_draft_tokens", 0))
            for reason, steps in final_stats.get("no_draft_steps", {}).items():
                self.no_draft_steps.labels(reason).inc(steps)
            generated = final_stats.get("generated_tokens", 0)
            if generated > 1 and final_stats.get("decode_s", 0) > 0:
                self.tpot.observe(final_stats["decode_s"] / (generated - 1))

    def watch_cost(self, source: Callable[[], dict | None]) -> None:
        """Export the engine's forward-cost curve (Engine.cost_info(measure=False)) on every scrape."""
        self.registry.register(_CostCollector(source))

    def watch_prefix_cache(self, source: Callable[[], dict]) -> None:
        """Export the engine's prefix cache counters (Engine.prefix_cache.info) on every scrape."""
        self.registry.register(_PrefixCacheCollector(source))

    def render(self) -> bytes:
        return generate_latest(self.registry)
