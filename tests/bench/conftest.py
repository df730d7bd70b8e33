"""Shared by the bench's tests: no network for loaders, the fetched data sets, hand-written results."""

import socket

import pytest


@pytest.fixture
def no_network(monkeypatch):
    """Task loaders are offline: any connection attempt fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("task loaders must not touch the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def need_data(*names: str) -> None:
    """Skip, with the one-line fix, where a data set `paraspec fetch` caches is absent, unless CI is set:
    there .ci/run fetches them, and a test that needs one must run (and fail loudly without it)."""
    from kernel_paths import on_ci

    from paraspec import catalog

    missing = [n for n in names if not catalog.is_fetched(n)]
    if missing and not on_ci():
        pytest.skip(
            f"{' and '.join(missing)} not fetched: run `paraspec fetch {' '.join(missing)}`"
        )


@pytest.fixture(scope="session")
def mtbench_data():
    need_data("mtbench")


@pytest.fixture(scope="session")
def sharegpt_data():
    need_data("sharegpt")


@pytest.fixture
def measurement():
    """The helper below: one measurement dict as results.json holds it."""
    return _m


def _m(
    system: str,
    task_id: str,
    tps: float,
    tokens: list[int],
    forwards: int | None,
    accepted: float | None,
    suite: str = "main",
    task_set: str = "grounded",
    ttft: float = 0.1,
) -> dict:
    """One measurement as results.json holds it (bench/base.Measurement.to_dict)."""
    return dict(
        suite=suite,
        system=system,
        task_set=task_set,
        task_id=task_id,
        mode="greedy",
        repeat=0,
        prompt_tokens=100,
        generated_tokens=len(tokens),
        wall_s=1.0,
        ttft_s=ttft,
        decode_s=1.0,
        decode_tokens_per_s=tps,
        forward_passes=forwards,
        mean_accepted_tokens_per_step=accepted,
        acceptance_rate=None,
        accepted_hist={"1": 3} if accepted else None,
        draft_s=None,
        peak_rss_delta_bytes=2 << 20,
        kv_cache_bytes=1 << 20,
        finish_reason="length",
        token_ids=tokens,
    )


@pytest.fixture
def hand_results() -> dict:
    """A results.json written by hand: AR, memory_decoding (2x and 3x AR, AR's tokens), hybrid (a hair
    behind md-tree on one task, ahead on the other), a transformers peer (half of AR's tokens), two
    grounded tasks, greedy, and a TTFT probe."""
    ref = [1, 2, 3, 4]
    ms = []
    for tid, md, hy, hf in (("t/0", 20.0, 19.0, 8.0), ("t/1", 30.0, 31.0, 12.0)):
        ms += [
            _m("ar", tid, 10.0, ref, 4, 1.0),
            _m("md-tree", tid, md, ref, 3 if tid == "t/0" else 2, 1.5 if tid == "t/0" else 3.0),
            _m("hybrid", tid, hy, ref, 3, 1.5),
            _m("hf", tid, hf, [1, 2, 9, 9], None, None),
        ]
    ms += [
        _m("ar", "probe", 10.0, [1], 1, None, suite="ttft", task_set="ttft", ttft=1.0),
        _m("md-tree", "probe", 10.0, [1], 1, None, suite="ttft", task_set="ttft", ttft=1.02),
    ]
    systems = {
        "ar": {
            "kind": "paraspec",
            "description": "paraspec, plain autoregressive",
            "status": "ok",
            "note": "",
        },
        "md-tree": {"kind": "paraspec", "description": "paraspec, md", "status": "ok", "note": ""},
        "hybrid": {
            "kind": "paraspec",
            "description": "paraspec, hybrid",
            "status": "ok",
            "note": "",
        },
        "hf": {"kind": "peer", "description": "transformers", "status": "ok", "note": ""},
        "llamacpp": {
            "kind": "peer",
            "description": "llamacpp",
            "status": "skipped",
            "note": "llama-cpp-python is not installed",
        },
    }
    environment = dict(
        date="2026-01-01 00:00:00 +0000",
        model="tiny",
        dtype="float32",
        quantization=None,
        cpu="cpu",
        cpu_count=2,
        cpu_features=["avx2"],
        kernels="avx2",
        torch_threads=2,
        torch="2",
        transformers="4",
        python="3.11",
        git_commit="abc",
        load_avg_at_end=[0.5, 0.5, 0.5],
        forward_cost=None,
    )
    config = dict(
        quick=False,
        repeats=1,
        trie_prefilled=False,
        memory_file=None,
        sampled={"temperature": 0.8, "top_p": 0.95},
    )
    return dict(
        schema=1,
        environment=environment,
        config=config,
        systems=systems,
        tasks=[],
        measurements=ms,
        serving=None,
        notes=[],
        wall_s=12.0,
    )
