"""LoRA (Hu et al. 2021) on frozen fp32 weights: y = x W^T + (alpha / r) x A^T B^T.

B starts at zero, so a fresh adapter leaves the model unchanged. `merged()` folds the update into
W (what `paraspec aspd export` writes); an adapter file holds only A, B and the new token rows.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# q/k/v, o and the MLP projections (fused as in transformer.py)
TARGETS = (
    "wqkv",
    "wo",
    "w_gate_up",
    "w_down",
)


class LoRALinear(nn.Module):
    def __init__(self, weight: torch.Tensor, rank: int, alpha: float):
        super().__init__()
        self.register_buffer("weight", weight, persistent=False)  # frozen base
        out_f, in_f = weight.shape
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, in_f))
        self.lora_B = nn.Parameter(torch.zeros(out_f, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (
            F.linear(x, self.weight) + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scale
        )

    def merged(self) -> torch.Tensor:
        return self.weight + (self.lora_B @ self.lora_A) * self.scale


def save_adapter(path: str | Path, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Adapters in fp16 (half the bytes; the merge and eval read these same values back)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().to(torch.float16).contiguous() for k, v in tensors.items()},
        str(path),
        metadata={"paraspec_aspd": json.dumps(meta)},
    )


def load_adapter(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    from safetensors import safe_open

    from ..errors import ConfigError

    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            f"adapter {str(path)!r} does not exist; run `paraspec aspd train` (make aspd-train)"
        )
    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata().get("paraspec_aspd", "{}"))
        tensors = {k: f.get_tensor(k).float() for k in f.keys()}
    return tensors, meta
