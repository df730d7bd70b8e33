"""The replicated drafting memory's merge rules, without a cluster (trie_hub.py is plain Python):
a delta is exactly the counts the replica's own trie added, merging is idempotent by
(replica, seq), replicas converge whatever the order, a lagging replica gets a snapshot, and the
snapshot file survives a restart of the hub."""

from __future__ import annotations

import random

from paraspec.decoding.memory.memory_file import add_output_arrays, output_arrays
from paraspec.decoding.memory.trie import TokenTrie
from paraspec.ray_serve.options import RayServeOptions, engine_deployment_options
from paraspec.ray_serve.trie_hub import DeltaRecorder, TrieHub, output_count
from paraspec.server import load_config


def _outputs(seed: int, n: int = 5) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(20) for _ in range(rng.randrange(5, 40))] for _ in range(n)]


def _serve(trie: TokenTrie, outputs: list[list[int]], tag: str) -> None:
    """What memory_decoding does with committed tokens: append in runs, then close."""
    for i, toks in enumerate(outputs):
        for j in range(0, len(toks), 3):
            trie.append((tag, i), toks[j : j + 3])
        trie.close((tag, i))


def _counts(trie: TokenTrie) -> dict:
    parent, token, count = output_arrays(trie)
    paths, out = [()], {}
    for p, t, c in zip(parent.tolist(), token.tolist(), count.tolist()):
        paths.append(paths[p] + (t,))
        out[paths[-1]] = c
    return out


def _recorded(trie: TokenTrie, outputs, tag: str):
    trie.journal = []
    _serve(trie, outputs, tag)
    rec = DeltaRecorder(trie.window)
    rec.feed(trie.journal)
    return rec.take()


def test_delta_is_exactly_what_the_replica_added():
    local = TokenTrie(10_000, 6)
    delta = _recorded(local, _outputs(1), "a")
    copy = TokenTrie(10_000, 6)
    add_output_arrays(copy, *delta)
    assert _counts(copy) == _counts(local)


def test_open_streams_wait_for_their_close():
    trie = TokenTrie(1000, 6)
    trie.journal = []
    trie.append("s", [1, 2, 3])
    rec = DeltaRecorder(6)
    rec.feed(trie.journal)
    assert rec.take() is None
    trie.journal = []
    trie.close("s")
    rec.feed(trie.journal)
    assert rec.take() is not None


def test_push_is_idempotent_and_replicas_converge():
    hub = TrieHub(100_000, 6)
    a, b = TokenTrie(100_000, 6), TokenTrie(100_000, 6)
    da, db = _recorded(a, _outputs(2), "a"), _recorded(b, _outputs(3), "b")
    v = hub.push("A", 0, da)
    assert hub.push("A", 0, da) == v  # a retried push adds nothing
    hub.push("B", 0, db)
    for trie, me, got in (
        (a, "A", hub.pull("A", hub.epoch, 0)),
        (b, "B", hub.pull("B", hub.epoch, 0)),
    ):
        assert len(got["deltas"]) == 1  # only the other's
        for d in got["deltas"]:
            add_output_arrays(trie, *d)
    assert _counts(a) == _counts(b) == _counts(hub.trie)


def test_lagging_and_new_replicas_get_a_snapshot():
    hub = TrieHub(200, 6)  # a log bounded by 200 nodes
    for seq in range(20):
        hub.push("A", seq, _recorded(TokenTrie(10_000, 6), _outputs(seq, 2), "a"))
    assert "snapshot" in hub.pull("B", None, -1)  # new: bootstrap
    assert "snapshot" in hub.pull("B", hub.epoch, 1)  # fell out of the log
    assert hub.pull("B", "another epoch", 5)["deltas"] == []  # the hub restarted: keep what it has


def test_snapshot_survives_a_restart(tmp_path):
    path = str(tmp_path / "hub.npz")
    hub = TrieHub(10_000, 6, path, snapshot_interval_s=0)
    hub.push("A", 0, _recorded(TokenTrie(10_000, 6), _outputs(4), "a"))
    again = TrieHub(10_000, 6, path)
    assert again.loaded == len(hub.trie) > 0 and again.epoch != hub.epoch
    path0 = next(iter(_counts(hub.trie)))
    assert output_count(again.trie, list(path0)) == output_count(hub.trie, list(path0)) > 0


def test_deployment_sizes_follow_the_config():
    config = load_config(None)
    config.schedule.max_batch_size = 8
    fixed = engine_deployment_options(config, RayServeOptions(replicas=3, threads=2, queue=4))
    assert fixed["num_replicas"] == 3 and fixed["max_ongoing_requests"] == 12
    assert fixed["ray_actor_options"] == {"num_cpus": 2}
    auto = engine_deployment_options(config, RayServeOptions(replicas=1, max_replicas=4))
    assert auto["autoscaling_config"]["target_ongoing_requests"] == 4 and "num_replicas" not in auto
