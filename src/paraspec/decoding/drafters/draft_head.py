"""A draft head: the tokens the model will write next, drafted from its own last hidden state,
a source of the one draft policy (draft_policy.py) inside the hybrid.

Where nothing is copied (open chat) the model-free sources find little: the text is new. A small
network trained on the model's own hidden states knows what the model tends to write next
(EAGLE, arXiv 2401.15077; Medusa). This one is EAGLE's head without its attention layer:

    u = fc([rms(f) * g_f ; rms(e) * g_e])  (+ down(silu(up(u))))   f: a row's normed last hidden state
                                                                    e: the embedding of the token it chose
    p = softmax(u @ E[vocab].T)           u: the next row's hidden state, scored by the model's
                                             embedding rows of the head's vocabulary (frozen: the LM
                                             head's where tied; else the head learns that space)

From the feature of the row whose logits chose the root and the root's embedding it predicts the
first draft token; its own output u stands in for the next row's feature to chain further. Each
node carries the chain's running probability, which the policy calibrates like every source's
estimate and prices against the cost curve. Its matrices run as int8 on the model's kernels
(quant.Int8Linear): a chained step streams a few percent of the model's bytes.

The one exception to "drafters see tokens only" (contract/proposer.py): a drafter with
`wants_features` gets, after each verified step, the feature of the row whose logits chose the
bonus token (and after the prefill, of the prompt's last row; `observe_feature`), and the head is
given the model's embedding when built (`HeadModel`). A head is trained per model (`paraspec
draft-head`, draft_head_train.py); its file names the model's shape and a fingerprint of its
embedding, checked when loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ...errors import ConfigError
from ..contract.tree import ROOT, DraftTree

HEAD_FORMAT = "paraspec-draft-head/1"
AUTO = "auto"  # draft_head "auto": the head `paraspec draft-head` trained for the loaded model
MAX_DEPTH = 6  # chained tokens: past this the running probability is rarely worth a row
MIN_P = 0.03  # nodes offered down to this running probability (the policy prices each)
# a chained step costs time of its own: the chain goes on only while its running probability
# stays where a verify row can pay for itself (below this, on the cost curves measured, rows cost
# more than they return, except rows the forward pads anyway, which the runners-up already fill)
EXTEND_P = 0.1
FIRST_WIDTH = (
    3  # alternatives offered at depth 1 (deeper: the runner-up as a leaf beside each node)
)
NORM_EPS = 1e-6
FINGERPRINT_TOKENS = 64  # embedding rows summed into the file's fingerprint of its model


@dataclass(frozen=True)
class HeadModel:
    """What of the model a draft head drafts with, handed in by the engine (paraspec/draft_heads.py
    builds it): this layer knows no model."""

    embed: Callable[[torch.Tensor], torch.Tensor]  # token ids [n] -> [n, dim]
    dim: int
    vocab_size: int
    # (weight [out, in] fp32, bias or None) -> a linear y = x @ W.T + b on the model's int8 kernels
    linear: Callable[[torch.Tensor, torch.Tensor | None], Callable[[torch.Tensor], torch.Tensor]]
    name: str = ""
    auto_path: Path | None = None  # the head trained for this model: what draft_head "auto" means

    def fingerprint(self) -> float:
        n = min(FINGERPRINT_TOKENS, self.vocab_size)
        return float(self.embed(torch.arange(n)).float().abs().sum())


def _rms(x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, gain.shape, gain, NORM_EPS)


class DraftHead:
    """A trained head on int8 kernels, bound to its model's embedding."""

    def __init__(self, weights: dict[str, torch.Tensor], vocab: torch.Tensor, model: HeadModel):
        def linear(name: str):
            return model.linear(weights[f"{name}.weight"].float(), weights[f"{name}.bias"].float())

        self.model = model
        self.vocab = vocab.long()
        self.ids = self.vocab.tolist()
        self.g_f, self.g_e = weights["gf"].float(), weights["ge"].float()
        self.fc = linear("fc")
        self.mlp = (linear("up"), linear("down")) if "up.weight" in weights else None
        rows = model.embed(self.vocab).float()
        self.scores = model.linear(rows, None)
        # the chained tokens are the head's own: their embeddings normed once, not looked up in
        # the model's (whose kept rows would churn with them) every chained step
        self.embedded = _rms(rows, self.g_e)

    def __deepcopy__(self, memo: dict) -> "DraftHead":
        return self  # read-only after load: a copied drafter (the bench's per-run copy) shares it

    @classmethod
    def load(cls, path: str, model: HeadModel) -> "DraftHead":
        """The head in `path`, checked against `model`: a one-line ConfigError names what differs."""
        fix = "train one for this model with `paraspec draft-head --model ...` (make draft-head)"
        if path == AUTO:
            path = str(model.auto_path)
            if model.auto_path is None or not model.auto_path.exists():
                raise ConfigError(
                    f"plugin_params.draft_head='auto': no head trained for {model.name} "
                    f"({path}); {fix}"
                )
        try:
            ck = torch.load(os.path.expanduser(path), map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise ConfigError(f"plugin_params.draft_head={path!r}: no such file; {fix}") from None
        except Exception as e:
            raise ConfigError(
                f"plugin_params.draft_head={path!r} is not a draft head file ({type(e).__name__}); {fix}"
            ) from None
        if not isinstance(ck, dict) or ck.get("format") != HEAD_FORMAT:
            raise ConfigError(
                f"plugin_params.draft_head={path!r} is not a {HEAD_FORMAT} file; {fix}"
            )
        want = (model.dim, model.vocab_size)
        if (ck["dim"], ck["vocab_size"]) != want:
            raise ConfigError(
                f"plugin_params.draft_head={path!r} was trained for a model of hidden size "
                f"{ck['dim']} and vocabulary {ck['vocab_size']}, this one has {want[0]} and "
                f"{want[1]}; {fix}"
            )
        if abs(ck["fingerprint"] - model.fingerprint()) > 1e-3 * abs(ck["fingerprint"]):
            raise ConfigError(
                f"plugin_params.draft_head={path!r} was trained for another model "
                f"({ck.get('model', '?')}) of the same shape; {fix}"
            )
        return cls(ck["weights"], ck["vocab"], model)

    def embed(self, token: int) -> torch.Tensor:
        """A token's normed embedding [1, dim] as the head reads it (any token: the root)."""
        return _rms(self.model.embed(torch.tensor([token])).float(), self.g_e)

    @torch.inference_mode()
    def step(self, feature: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(u, p): the next row's stand-in feature [1, dim] and the head's distribution over its
        vocabulary [V], from a row's feature [1, dim] and the normed embedding [1, dim] of the
        token that row chose (embed(), or `embedded` for the head's own)."""
        u = self.fc(torch.cat([_rms(feature, self.g_f), e], -1))
        if self.mlp is not None:
            up, down = self.mlp
            u = u + down(F.silu(up(u)))
        return u, torch.softmax(self.scores(u)[0], -1)

    def draft(
        self, feature: torch.Tensor, root: int, max_nodes: int, depth: int = MAX_DEPTH
    ) -> DraftTree:
        """The chain from the root (the best token at each depth while its running probability
        stays at EXTEND_P or more), with the runners-up beside it as leaves, every node at MIN_P
        or more; at most max_nodes."""
        tree, vocab = DraftTree(), self.ids
        f, e, parent, p = feature.float().reshape(1, -1), self.embed(root), ROOT, 1.0
        for d in range(depth):
            if len(tree) >= max_nodes:
                break
            f, probs = self.step(f, e)
            top_p, top_i = probs.topk(FIRST_WIDTH if d == 0 else 2)
            qs, ids = top_p.tolist(), top_i.tolist()
            best = p * qs[0]
            if best < MIN_P:
                break
            node = tree.add(vocab[ids[0]], parent, best)
            for q, i in zip(qs[1:], ids[1:]):
                if p * q >= MIN_P and len(tree) < max_nodes:
                    tree.add(vocab[i], parent, p * q)
            e, parent, p = self.embedded[ids[0]].reshape(1, -1), node, best
            if best < EXTEND_P:
                break
        return tree


class HeadSource:
    """Per request, the feature of the row that chose the root: the head drafts from it."""

    def __init__(self, head: DraftHead):
        self.head = head
        self._feature: dict[str, tuple[torch.Tensor, int]] = {}  # (feature, the token it chose)

    def begin(self, request_id: str) -> None:
        self._feature.pop(request_id, None)

    def observe(self, request_id: str, committed: list[int] | tuple[int, ...]) -> None:
        # a step's feature comes after its tokens: until then the old one is stale
        self._feature.pop(request_id, None)

    def observe_feature(self, request_id: str, feature: torch.Tensor, token: int) -> None:
        self._feature[request_id] = (feature, int(token))

    def ready(self, request_id: str, root: int) -> bool:
        """Whether the request has the feature of the row that chose `root` (not so where the
        prompt's prefill was copied from a sibling sample's)."""
        kept = self._feature.get(request_id)
        return kept is not None and kept[1] == root

    def candidates(self, request_id: str, root: int, budget: int) -> DraftTree | None:
        if not self.ready(request_id, root) or budget <= 0:
            return None
        return self.head.draft(self._feature[request_id][0], root, budget) or None

    def end(self, request_id: str) -> None:
        self._feature.pop(request_id, None)
