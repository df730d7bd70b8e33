"""Which models `paraspec aspd train` fine-tunes: those whose math TrainModel (train.py) writes out.

TrainModel computes paraspec's forward (transformer.py) from the weight names checkpoint.py makes:
Llama, Qwen2/2.5 (q/k/v biases) and Qwen3 (per-head q/k RMS norms), tied or untied heads, RoPE
default / llama3 / linear. What a model file may say beyond that (a tensor the loader does not
read, partial RoPE, sliding-window attention, experts, another activation, soft-capped logits, a
RoPE scaling paraspec does not apply) the loader already refuses (model/architecture.py), for
generation too; check_trainable re-checks that and adds that the weights are ones TrainModel takes.
"""

from __future__ import annotations

import torch

from ..errors import ModelLoadError
from ..model.architecture import check_loaded

TOP_WEIGHTS = ("tok_embeddings", "norm", "lm_head")
LAYER_WEIGHTS = (
    "attn_norm",
    "ffn_norm",
    "wqkv",
    "bqkv",
    "wo",
    "bo",
    "w_gate_up",
    "w_down",
    "q_norm",
    "k_norm",
)
_FIX = "`paraspec aspd train` fine-tunes Llama / Qwen2 / Qwen3 decoders that paraspec's forward computes exactly"


def refuse(where: str, what: str) -> ModelLoadError:
    return ModelLoadError(
        f"{where}: {what}, which the ASPD training forward cannot represent; {_FIX} "
        "(docs/aspd.md, Training): pick a model without it"
    )


def check_weights(weights: dict, n_layers: int) -> None:
    """Every weight is a float tensor with a name TrainModel uses."""
    known = set(TOP_WEIGHTS) | {f"layers.{i}.{n}" for i in range(n_layers) for n in LAYER_WEIGHTS}
    for name, w in weights.items():
        if name not in known:
            raise refuse("the loaded weights", f"tensor {name!r}")
        if not isinstance(w, torch.Tensor):
            raise refuse(
                "the loaded weights", f"{name!r} as {type(w).__name__} (load it dequantised, fp32)"
            )


def check_trainable(loaded) -> None:
    """Refuse (ModelLoadError) a loaded model whose file has math TrainModel would leave out: the
    loader's architecture checks (already passed at load; run again on what LoadedModel kept, no
    file read) and the training-only one, that every weight is a float tensor TrainModel uses."""
    check_loaded(loaded)
    check_weights(loaded.weights, loaded.args.n_layers)
