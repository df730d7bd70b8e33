"""The bundled model (SmolLM2-135M-Instruct) on Ray Serve: two replicas (1 torch thread each,
memory_decoding, trie sync on) behind paraspec's app, driven by the official openai client.
Greedy chat answers, several at once, streamed and not, equal plain autoregressive decoding
offline with the replicas' numerics (same dtype, quantization and thread count).

Marked `ray` and `slow`: a cluster start and two model loads (~1 min on 2 cores)."""

from __future__ import annotations

import concurrent.futures as cf
import time

import pytest

ray = pytest.importorskip(
    "ray", reason="the paraspec[ray] extra is not installed (make test-ray installs it)"
)

from cluster import Cluster, descendants, start_ray  # noqa: E402
from paraspec import LLM, SamplingParams  # noqa: E402
from paraspec.ray_serve.options import RayServeOptions  # noqa: E402
from paraspec.server import load_config  # noqa: E402

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

NAME = "smollm2"
MAX_TOKENS = 40
QUESTIONS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that adds two numbers.",
    "List three colours of the rainbow.",
    "Explain what a CPU cache is.",
    "Give two tips for sleeping well.",
    "What is 12 times 12?",
    "Name a famous painting and its painter.",
    "Translate 'good morning' into Spanish and French.",
]


def test_bundled_model_through_serve_equals_offline_ar(tmp_path):
    import torch

    start_ray()
    config = load_config(None)  # the bundled model, memory_decoding
    config.model_deploy.model.model_name = NAME
    opts = RayServeOptions(
        replicas=2,
        threads=1,
        sync_interval_s=0.5,
        snapshot_path=str(tmp_path / "hub.npz"),
        app_name="paraspec-bundled",
    )
    cluster = None
    try:
        cluster = Cluster(config, opts)
        threads = torch.get_num_threads()
        # no plugin: plain AR
        offline = LLM(
            config.model_deploy.model.model_weight_path,
            dtype=opts.engine.dtype,
            quantization=opts.engine.quantization,
            max_batch_size=config.schedule.max_batch_size,
            num_threads=opts.threads,
            prefill_chunk=config.schedule.prefill_chunk_size,
        )
        torch.set_num_threads(threads)
        convs = [[{"role": "user", "content": q}] for q in QUESTIONS]
        want = offline.chat(convs, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
        assert all(o.stats["draft_tokens"] == 0 for o in want)  # plain AR: nothing drafted

        def ask(i: int) -> tuple[str, int, str, float]:
            kw = dict(
                model=NAME, messages=convs[i % len(convs)], max_tokens=MAX_TOKENS, temperature=0
            )
            if i >= len(convs):  # the second round streams (and meets a warmer memory)
                parts = list(
                    cluster.client.chat.completions.create(
                        **kw, stream=True, stream_options={"include_usage": True}
                    )
                )
                text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
                ext = [p.model_extra.get("paraspec") or {} for p in parts]
                stats = [e for e in ext if "replica" in e][0]
                return (
                    text,
                    parts[-1].usage.completion_tokens,
                    stats["replica"],
                    stats["mean_accepted_tokens_per_step"],
                )
            r = cluster.client.chat.completions.create(**kw)
            ext = r.model_extra["paraspec"]
            return (
                r.choices[0].message.content,
                r.usage.completion_tokens,
                ext["choices"][0]["replica"],
                ext["mean_accepted_tokens_per_step"],
            )

        with cf.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(ask, i) for i in range(2 * len(convs))]
            done, pending = cf.wait(futures, timeout=600)
            assert not pending, f"{len(pending)} requests still running after 600 s"
        got = [f.result() for f in futures]
        for i, (text, tokens, *_) in enumerate(got):
            o = want[i % len(convs)]
            assert (text, tokens) == (o.text, len(o.token_ids)), (
                f"request {i}: {text!r} != {o.text!r}"
            )
        assert len({g[2] for g in got}) == 2  # both replicas answered some
        assert max(g[3] for g in got) > 1.0  # and decoded in parallel (memory_decoding)
    finally:
        if cluster is not None:
            cluster.close()
        ray.shutdown()
    deadline = time.monotonic() + 30
    while descendants() and time.monotonic() < deadline:
        time.sleep(0.25)
    assert not descendants(), descendants()
