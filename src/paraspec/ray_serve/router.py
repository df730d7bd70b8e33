"""TriePrefixRouter: a prompt's family stays on one engine replica, where its trie is warm.

The key is the first K prompt token ids after the chat template (the system prompt and the start
of the first turn). Rendezvous hashing ranks the live replicas by hash(key, replica): the owner
first, every other replica after it, so Serve sends the request to the owner and spills to the
least loaded of the rest only when the owner is full (it refuses work past max_ongoing_requests).
A replica joining or leaving moves only the families it owns. Stateless: no RPC on the hot path.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import Sequence

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

DEFAULT_AFFINITY_TOKENS = 32


def affinity_key(prompt: Sequence[int], k: int = DEFAULT_AFFINITY_TOKENS) -> bytes:
    return array("q", [int(t) for t in prompt[:k]]).tobytes()


def rank_replicas(key: bytes, replica_ids: Sequence[str]) -> list[int]:
    """Indices of replica_ids, owner first (highest rendezvous score)."""

    def score(rid: str) -> int:
        return int.from_bytes(hashlib.blake2b(key + rid.encode(), digest_size=8).digest(), "big")

    return sorted(range(len(replica_ids)), key=lambda i: score(replica_ids[i]), reverse=True)


class TriePrefixRouter(RequestRouter):
    def initialize_state(self, affinity_tokens: int = DEFAULT_AFFINITY_TOKENS, **_) -> None:
        self.affinity_tokens = affinity_tokens

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        prompt = (
            pending_request.args[0]
            if pending_request is not None and pending_request.args
            else None
        )
        if len(candidate_replicas) < 2 or not isinstance(prompt, list) or not prompt:
            return [candidate_replicas]  # control calls (model_info, stats) or one replica
        key = affinity_key(prompt, getattr(self, "affinity_tokens", DEFAULT_AFFINITY_TOKENS))
        order = rank_replicas(key, [r.replica_id.unique_id for r in candidate_replicas])
        ranked = [candidate_replicas[i] for i in order]
        return [ranked[:1], ranked[1:]]
