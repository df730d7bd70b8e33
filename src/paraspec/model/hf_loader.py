"""A Hugging Face folder -> LoadedModel: config.json and the safetensors shards, read as
transformer.py's names. A config that asks for math the forward does not compute
(architecture.py: sliding windows, yarn RoPE, experts, ...) is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from ..errors import ModelLoadError
from . import architecture
from .args import ModelArgs
from .checkpoint import LoadedModel, check_arch, fuse_layer


def load_hf(path: Path) -> LoadedModel:
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(
            f"cannot read {str(path / 'config.json')!r} ({e}); "
            "a Hugging Face model folder needs a valid config.json"
        ) from None
    arch = config.get("model_type", "?")
    check_arch(arch, str(path / "config.json"))
    architecture.check_hf_config(config, str(path / "config.json"))
    files = safetensors_files(path)
    from safetensors.torch import load_file

    raw: dict[str, torch.Tensor] = {}
    try:
        for f in files:
            for k, a in load_file(str(f)).items():
                raw[k] = a
    except Exception as e:
        raise ModelLoadError(
            f"cannot read {str(f)!r} ({type(e).__name__}: {e}); the weights file "
            "is corrupt or incomplete"
        ) from None
    architecture.check_tensors(raw, "hf", config.get("num_hidden_layers", 0), str(path))

    def get(name: str, required: bool = True):
        for prefix in ("model.", ""):
            if prefix + name in raw:
                return raw[prefix + name].float().numpy()
        if required:
            raise ModelLoadError(
                f"weights in {str(path)!r} lack tensor {name!r}; the checkpoint is "
                f"incomplete or not a {arch} model"
            )
        return None

    n_heads = config["num_attention_heads"]
    rope = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or (
        rope if rope.get("rope_type") not in (None, "default") else None
    )
    args = ModelArgs(
        arch=arch,
        vocab_size=config["vocab_size"],
        dim=config["hidden_size"],
        n_layers=config["num_hidden_layers"],
        n_heads=n_heads,
        n_kv_heads=config.get("num_key_value_heads") or n_heads,
        head_dim=config.get("head_dim") or config["hidden_size"] // n_heads,
        hidden_dim=config["intermediate_size"],
        norm_eps=config.get("rms_norm_eps", 1e-6),
        rope_theta=config.get("rope_theta") or rope.get("rope_theta") or 10000.0,
        rope_scaling=scaling,
        max_seq_len=config.get("max_position_embeddings", 4096),
        tie_embeddings=bool(config.get("tie_word_embeddings", False))
        or get("lm_head.weight", False) is None,
        qkv_bias=arch == "qwen2" or bool(config.get("attention_bias", False)),
        qk_norm=arch == "qwen3",
    )
    w: dict[str, np.ndarray] = {
        "tok_embeddings": get("embed_tokens.weight"),
        "norm": get("norm.weight"),
    }
    if not args.tie_embeddings:
        w["lm_head"] = get("lm_head.weight")
    for i in range(args.n_layers):
        b = f"layers.{i}."
        bias = args.qkv_bias
        fuse_layer(
            w,
            i,
            get(b + "self_attn.q_proj.weight"),
            get(b + "self_attn.k_proj.weight"),
            get(b + "self_attn.v_proj.weight"),
            get(b + "self_attn.o_proj.weight"),
            get(b + "mlp.gate_proj.weight"),
            get(b + "mlp.up_proj.weight"),
            get(b + "mlp.down_proj.weight"),
            get(b + "input_layernorm.weight"),
            get(b + "post_attention_layernorm.weight"),
            get(b + "self_attn.q_proj.bias", bias),
            get(b + "self_attn.k_proj.bias", bias),
            get(b + "self_attn.v_proj.bias", bias),
            get(b + "self_attn.q_norm.weight", args.qk_norm),
            get(b + "self_attn.k_norm.weight", args.qk_norm),
            get(b + "self_attn.o_proj.bias", arch == "llama" and bias),
        )
    tok_source = {"kind": "hf", "path": str(path), "config": config}
    return LoadedModel(args, w, path, path.name, tok_source, config, tuple(raw))


def safetensors_files(path: Path) -> list[Path]:
    """The weight files: the shards model.safetensors.index.json names (each must be there: a
    half-downloaded folder fails naming the missing shard), else every *.safetensors."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, json.JSONDecodeError, KeyError, AttributeError, TypeError) as e:
            raise ModelLoadError(
                f"cannot read {str(index)!r} ({type(e).__name__}: {e}); a sharded "
                "checkpoint needs its index with a weight_map"
            ) from None
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise ModelLoadError(
                f"{str(path)!r} lacks shard {missing[0]!r} named in model.safetensors.index.json "
                f"({len(missing)} of {len(shards)} missing); download the whole checkpoint"
            )
        return [path / s for s in shards]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(
            f"no *.safetensors weights in {str(path)!r}; paraspec reads safetensors "
            "(convert .bin checkpoints with transformers' save_pretrained)"
        )
    return files
