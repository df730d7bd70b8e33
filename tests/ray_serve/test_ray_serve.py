"""paraspec on Ray Serve, end to end: an in-process Ray cluster (2 CPUs, loopback), two engine
replicas of a tiny random model behind paraspec's own FastAPI app, the official openai client.

Every load loop is bounded in count and time. Marked `ray`: skipped without the extra
(`make test-ray` installs it and runs these)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import time

import pytest

ray = pytest.importorskip(
    "ray", reason="the paraspec[ray] extra is not installed (make test-ray installs it)"
)

import openai  # noqa: E402
from cluster import APP, Cluster, descendants, start_ray  # noqa: E402
from paraspec import LLM, SamplingParams  # noqa: E402
from paraspec.ray_serve.options import RayServeOptions  # noqa: E402
from paraspec.ray_serve.router import affinity_key, rank_replicas  # noqa: E402
from paraspec.server import load_config  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

MODEL = "tiny"
SYNC_S = 0.5
K = 8


def _config(model_dir):
    config = load_config(None, model=str(model_dir))  # memory_decoding: the default drafter
    config.model_deploy.model.model_name = MODEL
    config.model_deploy.max_seq_len, config.model_deploy.max_input_token_len = 400, 256
    config.schedule.max_iter_times = 200
    config.schedule.max_batch_size = 4
    return config


@pytest.fixture(scope="module")
def cluster(tiny_model_dir, tmp_path_factory):
    # varied greedy outputs (the default repeats a token)
    model = tiny_model_dir("llama", init_std=0.3)
    start_ray()
    opts = RayServeOptions(
        replicas=2,
        threads=1,
        queue=2,
        affinity_tokens=K,
        sync_interval_s=SYNC_S,
        snapshot_path=str(tmp_path_factory.mktemp("hub") / "hub.npz"),
        snapshot_interval_s=0.5,
        app_name="paraspec-test",
    )
    c = Cluster(_config(model), opts)
    c.model = model
    try:
        yield c
    finally:
        if ray.is_initialized():  # test_shutdown_leaves_no_process shut it down already
            c.close()
            ray.shutdown()


@pytest.fixture(scope="module")
def offline(cluster):
    """Greedy AR decoding in this process, same dtype and thread count as a replica (1)."""
    import torch

    threads = torch.get_num_threads()
    llm = LLM(str(cluster.model), num_threads=1)
    torch.set_num_threads(threads)
    return llm


def test_openai_client_through_serve(cluster):
    c = cluster.client
    assert [m.id for m in c.models.list().data] == [MODEL]
    r = c.completions.create(model=MODEL, prompt="hello world", max_tokens=12, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop") and r.usage.completion_tokens >= 1
    chat = c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0
    )
    assert chat.choices[0].message.role == "assistant"
    parts = list(
        c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=8,
            temperature=0,
            stream=True,
        )
    )
    text = "".join(p.choices[0].delta.content or "" for p in parts if p.choices)
    assert text == chat.choices[0].message.content  # streamed == whole, greedy
    # an error keeps paraspec's own JSON (one code path): the field and the fix
    bad = cluster.http.post("/v1/completions", json={"model": "nope", "prompt": "x"})
    assert bad.status_code == 404 or bad.status_code == 400
    assert bad.json()["error"]["param"] == "model"


# ------------------------------------------------------------------------------------ helpers

GREEDY = dict(temperature=0, max_tokens=24)


def _complete(cluster, prompt: str, max_tokens: int = 24, plain: bool = False) -> dict:
    extra = {"paraspec": {"plugin_params": "none"}} if plain else None  # plain: one token a step
    r = cluster.client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0, extra_body=extra
    )
    ext = r.to_dict()["paraspec"]
    return {
        "text": r.choices[0].text,
        "replica": ext["choices"][0]["replica"],
        "accepted": ext["mean_accepted_tokens_per_step"],
    }


def _complete_ext(cluster, extra: dict | None = None) -> dict:
    r = cluster.client.completions.create(
        model=MODEL, prompt="light update", max_tokens=2, temperature=0, extra_body=extra
    )
    return r.to_dict()["paraspec"]


def _status(cluster, extra: dict) -> int:
    try:
        _complete_ext(cluster, extra)
        return 200
    except openai.APIStatusError as e:
        return e.status_code


def _until(check, timeout_s: float = 10.0) -> bool:
    """check() becomes true within timeout_s (the ingress polls its replicas' settings every 2 s)."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout_s:
            return False
        time.sleep(0.25)
    return True


def _load(fn, items, concurrency: int, budget_s: float) -> list:
    """fn(item) for each item on `concurrency` threads; (item, result or exception) in order.
    Bounded: every request has the client's timeout, and the whole load budget_s."""
    with cf.ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(_timed, fn, it) for it in items]
        done, pending = cf.wait(futures, timeout=budget_s)
        assert not pending, f"{len(pending)} requests still running after {budget_s} s"
    return [f.result() for f in futures]


def _timed(fn, item):
    start = time.monotonic()
    try:
        return start, time.monotonic(), fn(item)
    except Exception as e:  # a failed request is a result here
        return start, time.monotonic(), e


def _owned_prompts(cluster, tokenizer, owner: str, n: int, tag: str) -> list[str]:
    """n fresh prompts whose first K tokens the router gives to `owner` first."""
    ids = cluster.replica_ids()
    out, i = [], 0
    while len(out) < n:
        p = f"{tag}{i:04d}: the rest of the prompt {i}"
        if ids[rank_replicas(affinity_key(tokenizer.encode(p), K), ids)[0]] == owner:
            out.append(p)
        i += 1
    return out


# ------------------------------------------------------------------------------------ tests


def test_sync_shares_memory_across_replicas(cluster, offline):
    """Family A served on replica 1 reaches replica 2's trie within 2 sync intervals (plus the
    calls' latency), and a request forced to replica 2 then accepts more tokens per step."""
    tok = offline.tokenizer
    r1, r2 = cluster.replica_ids()
    a, q = _owned_prompts(cluster, tok, r1, 1, "famA"), _owned_prompts(cluster, tok, r1, 1, "famQ")
    params = SamplingParams(temperature=0, max_tokens=48)
    out = offline.generate(a[0], params)[0]
    path = [t for t in out.token_ids][:6]
    assert all(n == 0 for _, n in cluster.broadcast("trie_count", path)), (
        "path already known: pick another"
    )
    # before: replica 2 on a fresh prompt of its own (what it accepts without A's memory)
    before = [r for r in cluster.broadcast("generate_here", r2, tok.encode(q[0]), params) if r]
    served = _complete(cluster, a[0], 48)
    assert served["replica"] == r1 and served["text"] == out.text
    done, waited = time.monotonic(), None
    while time.monotonic() - done < 10:
        counts = dict(cluster.broadcast("trie_count", path))
        if counts[r2] > 0:
            waited = time.monotonic() - done
            break
        time.sleep(0.05)
    assert waited is not None and waited <= 2 * SYNC_S + 0.5, (
        f"replica 2 saw family A after {waited} s"
    )
    after = [r for r in cluster.broadcast("generate_here", r2, tok.encode(a[0]), params) if r]
    assert after[0]["token_ids"] == out.token_ids  # lossless on the other replica
    acc0 = before[0]["stats"]["mean_accepted_tokens_per_step"]
    acc1 = after[0]["stats"]["mean_accepted_tokens_per_step"]
    print(
        f"sync: replica 2 had family A after {waited:.2f} s; accepted/step {acc0:.2f} -> {acc1:.2f}"
    )
    assert acc1 > acc0 + 0.5


def test_lossless_through_the_cluster(cluster, offline):
    """16 concurrent greedy requests equal offline AR decoding; both replicas served some."""
    prompts = [f"{i:02d}-lossless {w}" for i, w in enumerate("abcdefghijklmnop")]
    want = [o.text for o in offline.generate(prompts, SamplingParams(**GREEDY))]
    got = _load(lambda p: _complete(cluster, p), prompts, concurrency=16, budget_s=120)
    fails = [r for _, _, r in got if isinstance(r, Exception)]
    assert not fails, fails[:3]
    assert [r["text"] for _, _, r in got] == want
    assert len({r["replica"] for _, _, r in got}) == 2


def test_affinity_then_spill(cluster):
    """At low load each prefix family stays on one replica (its owner); far above capacity one
    family spreads over both, with no failure."""
    families = [[f"F{f}-prefix/request {i}" for i in range(4)] for f in range(6)]
    seen: dict[int, set] = {}
    for f, prompts in enumerate(families):
        got = _load(lambda p: _complete(cluster, p, 8), prompts, concurrency=2, budget_s=60)
        seen[f] = {r["replica"] for _, _, r in got}
    assert all(len(s) == 1 for s in seen.values()), seen
    assert len(set().union(*seen.values())) == 2  # 6 families: both replicas own some (p = 31/32)
    crowd = [f"F0-prefix/crowd {i}" for i in range(28)]  # > 2 x max_ongoing_requests (6) at once
    got = _load(
        lambda p: _complete(cluster, p, 160, plain=True), crowd, concurrency=14, budget_s=120
    )
    fails = [r for _, _, r in got if isinstance(r, Exception)]
    assert not fails, fails[:3]
    assert len({r["replica"] for _, _, r in got}) == 2


def test_metrics_cover_every_replica(cluster):
    _complete(cluster, "metrics please", 4)
    text = cluster.http.get("/metrics").text
    samples = [
        s
        for f in text_string_to_metric_families(text)
        if f.name == "paraspec_generation_tokens"
        for s in f.samples
        if s.name == "paraspec_generation_tokens_total"
    ]
    assert {s.labels["replica"] for s in samples} == set(cluster.replica_ids())
    assert sum(s.value for s in samples) > 0


def test_reconfigure_hot_reloads_the_drafter(cluster):
    """reconfigure(user_config) swaps the drafter of the running replicas (same replica ids, same
    engine). Serve calls it on a user_config-only update from `serve deploy` / a RayService; here
    it is called on every replica directly, as serve.run would restart them instead."""
    ids = cluster.replica_ids()
    cluster.broadcast("reconfigure", {"plugin_params": "none"})
    assert {s["plugin"] for s in cluster.broadcast("stats")} == {None}
    plain = _complete(cluster, "reconfigured 1", 8)
    assert plain["accepted"] == 1.0  # no drafter: one token a step
    memory = {"plugin_type": "memory_decoding", "decoding_length": 8}
    cluster.broadcast("reconfigure", {"plugin_params": memory, "speculationGamma": 8})
    assert {(s["plugin"], s["gamma"]) for s in cluster.broadcast("stats")} == {
        ("memory_decoding", 8)
    }
    with pytest.raises(Exception, match="speculation_gamma"):
        cluster.broadcast("reconfigure", {"plugin_params": memory, "speculationGamma": 2})
    with pytest.raises(Exception, match="speculation_gamma"):  # the reloaded gamma (8) holds
        cluster.broadcast("reconfigure", {"plugin_params": {**memory, "decoding_length": 12}})
    assert {(s["plugin"], s["gamma"]) for s in cluster.broadcast("stats")} == {
        ("memory_decoding", 8)
    }
    assert cluster.replica_ids() == ids


def test_replica_sigkill_mid_load(cluster, offline):
    """SIGKILL one engine replica under load: only its in-flight requests may fail, every request
    started 2 s after the kill succeeds, and 2 replicas are RUNNING again within 30 s, the new one
    bootstrapped with the hub's memory."""
    stats = cluster.broadcast("stats")
    victim = stats[0]
    prompts = [f"{i:03d}-kill load" for i in range(60)]
    killed_at = []

    def request(p):
        if p == prompts[12]:
            os.kill(victim["pid"], signal.SIGKILL)
            killed_at.append(time.monotonic())
        return _complete(cluster, p, 24)

    got = _load(request, prompts, concurrency=4, budget_s=180)
    failed = [(s, r) for s, _, r in got if isinstance(r, Exception)]
    late = [r for s, _, r in got if isinstance(r, Exception) and s > killed_at[0] + 2]
    print(
        f"replica kill: {len(failed)}/{len(prompts)} failed (concurrency 4), {len(late)} after the kill + 2 s"
    )
    assert len(failed) <= 6 and not late, failed[:3]  # max_ongoing_requests of the victim
    waited = cluster.wait_running(2, 30)
    fresh = [
        s for s in cluster.live_stats(victim["replica"], 2) if s["replica"] != stats[1]["replica"]
    ][0]
    print(
        f"replica kill: 2 RUNNING again after {waited:.1f} s; new replica bootstrapped "
        f"{fresh['sync']['bootstrapped']} trie nodes"
    )
    assert fresh["replica"] != victim["replica"] and fresh["sync"]["bootstrapped"] > 0


def test_triehub_kill_keeps_serving(cluster, offline):
    """Kill the TrieHub under load: 0 failed requests, outputs unchanged; it restarts from its
    snapshot and the replicas resync with it."""
    hub = ray.get_actor(cluster.opts.hub_name, namespace="paraspec")
    ray.get(hub.maybe_save.remote(True), timeout=10)
    saved = ray.get(hub.stats.remote(), timeout=10)["nodes"]
    prompts = [f"{i:02d}-hub kill {i}" for i in range(16)]
    want = [o.text for o in offline.generate(prompts, SamplingParams(**GREEDY))]

    def request(p):
        if p == prompts[3]:
            ray.kill(hub, no_restart=False)
        return _complete(cluster, p)

    got = _load(request, prompts, concurrency=4, budget_s=120)
    assert [r["text"] if isinstance(r, dict) else r for _, _, r in got] == want
    deadline = time.monotonic() + 30
    while True:
        try:
            after = ray.get(hub.stats.remote(), timeout=5)
            break
        except Exception:
            assert time.monotonic() < deadline, "the TrieHub did not restart"
            time.sleep(0.5)
    print(f"hub kill: 0/16 failed; restarted hub reloaded {after['loaded']} nodes (saved {saved})")
    assert after["loaded"] >= saved > 0


def test_controller_kill_keeps_serving(cluster):
    controller = ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
    prompts = [f"{i:02d}-controller kill" for i in range(24)]

    def request(p):
        if p == prompts[4]:
            ray.kill(controller, no_restart=False)
        return _complete(cluster, p, 16)

    got = _load(request, prompts, concurrency=4, budget_s=120)
    fails = [r for _, _, r in got if isinstance(r, Exception)]
    assert not fails, fails[:3]
    cluster.wait_running(2, 30)


def test_user_config_update_reconfigures_running_replicas(cluster, tmp_path):
    """What `serve deploy` and a KubeRay RayService do when only a deployment's user_config
    changes: Serve calls reconfigure() on the running replicas (the same processes), no restart.
    Deployed from a config as they do (serve.run gives each run a new code version: a restart).
    Near the end: it replaces the module's app (2 CPUs hold 2 replicas, not 4)."""
    from ray import serve
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeDeploySchema

    name = "paraspec-declarative"
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "BackendConfig": {
                    "ModelDeployConfig": {
                        "maxSeqLen": 400,
                        "maxInputTokenLen": 256,
                        "ModelConfig": [
                            {"modelName": MODEL, "modelWeightPath": str(cluster.model)}
                        ],
                    },
                    "ScheduleConfig": {"maxBatchSize": 4, "maxIterTimes": 200},
                }
            }
        )
    )

    def apply(user_config: dict) -> None:
        app = {
            "name": name,
            "route_prefix": "/",
            "import_path": "paraspec.ray_serve:build_app",
            "args": {
                "config": str(config),
                "replicas": 2,
                "threads": 1,
                "sync_interval_s": 0,
                "app_name": name,
            },
            "deployments": [{"name": "ParaspecEngine", "user_config": user_config}],
        }
        _get_global_client().deploy_apps(ServeDeploySchema(applications=[app]), _blocking=True)

    def wait_for(want: set, timeout_s: float = 60) -> dict:
        start = time.monotonic()
        while True:
            try:
                stats = handle.broadcast("stats").results(timeout_s=10)
                if {(s["plugin"], s["gamma"]) for s in stats} == want and len(stats) == 2:
                    return {s["pid"]: s["replica"] for s in stats}
            except Exception:
                pass
            assert time.monotonic() - start < timeout_s, (
                f"replicas not at {want} after {timeout_s} s"
            )
            time.sleep(0.25)

    serve.delete(APP)
    try:
        memory = {"plugin_type": "memory_decoding", "decoding_length": 8}
        apply({"plugin_params": memory, "speculationGamma": 8})
        handle = serve.get_deployment_handle("ParaspecEngine", name)
        before = wait_for({("memory_decoding", 8)})
        apply({"plugin_params": "none", "speculationGamma": 8})
        assert wait_for({(None, 8)}) == before  # same processes, same replicas
        assert _complete(cluster, "light update", 8)["accepted"] == 1.0
        # the ingress follows: responses name the new default drafter (none)
        assert _until(lambda: _complete_ext(cluster)["plugin"] is None)
        apply({"plugin_params": {**memory, "decoding_length": 4}, "speculationGamma": 4})
        assert wait_for({("memory_decoding", 4)}) == before
        assert _complete(cluster, "light update", 8)["accepted"] >= 1.0
        assert _until(lambda: _complete_ext(cluster)["plugin"] == "memory_decoding")
        # and checks a request's plugin_params against the reloaded gamma (4): decoding_length 8 is a 400
        too_long = {"paraspec": {"plugin_params": {**memory, "decoding_length": 8}}}
        assert _until(lambda: _status(cluster, too_long) == 400)
        assert (
            _status(cluster, {"paraspec": {"plugin_params": {**memory, "decoding_length": 4}}})
            == 200
        )
    finally:
        serve.delete(name)


def test_shutdown_leaves_no_process(cluster):
    """Last: serve and Ray shut down within 30 s and no process started from here is left."""
    start = time.monotonic()
    cluster.close()
    ray.shutdown()
    while descendants() and time.monotonic() - start < 30:
        time.sleep(0.25)
    print(f"shutdown: {time.monotonic() - start:.1f} s")
    assert not descendants(), descendants()
