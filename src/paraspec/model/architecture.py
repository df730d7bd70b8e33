"""What paraspec's forward (transformer.py) computes, and the one-line refusal of a model file that says more.

The forward is a dense Llama / Qwen2 / Qwen3 decoder: SwiGLU with silu, RoPE over every dimension
of a head (default, llama3 or linear scaling), full causal attention on every layer, no experts,
no soft-capping, and the weights loader.py reads. A config key or GGUF field that asks for
anything else (a sliding window, yarn RoPE, gelu, a tensor nobody reads) would otherwise be
ignored and the model would generate as another network, without any error. check_hf_config /
check_gguf_fields / check_tensors run at load (loader.py, for generation and training alike);
check_loaded runs them again on what a LoadedModel kept (no file read), for aspd/trainable.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..errors import ModelLoadError

# what rope.rope_tables computes; freq_factors: a GGUF's rope_freqs, as `paraspec aspd export` writes them
HF_ROPE_KINDS = (None, "default", "llama3", "linear", "freq_factors")
GGUF_ROPE_SCALINGS = (None, "none", "linear")  # llama.cpp's default (no key) is linear
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
_SOFTCAP_KEYS = ("attn_logit_softcapping", "final_logit_softcapping")
# the tensors the loaders read (anything else is math paraspec would drop); group 1: a layer's index
# old checkpoints store the RoPE table: recomputed
_HF_READ = re.compile(
    r"(?:model\.)?(?:embed_tokens\.weight|norm\.weight|lm_head\.weight|layers\.(\d+)\."
    r"(?:self_attn\.[qkvo]_proj\.(?:weight|bias)|self_attn\.[qk]_norm\.weight|"
    r"mlp\.(?:gate|up|down)_proj\.weight|(?:input|post_attention)_layernorm\.weight)|"
    r".*rotary_emb\.inv_freq)"
)
_GGUF_READ = re.compile(
    r"(?:token_embd|output_norm|output|rope_freqs)\.weight|blk\.(\d+)\.(?:attn_[qkv]\."
    r"(?:weight|bias)|attn_output\.(?:weight|bias)|(?:attn_norm|ffn_norm|attn_q_norm|"
    r"attn_k_norm|ffn_gate|ffn_up|ffn_down)\.weight)"
)


def refuse(where: str, what: str, runs: str) -> ModelLoadError:
    """`what` the file at `where` asks for; `runs`: what paraspec computes instead."""
    return ModelLoadError(
        f"{where}: {what}, which paraspec's forward cannot represent ({runs}); "
        "use a model without it"
    )


def check_hf_config(config: dict, where: str) -> None:
    rope = {**(config.get("rope_scaling") or {}), **(config.get("rope_parameters") or {})}
    if config.get("mlp_bias"):
        raise refuse(where, "mlp_bias: feed-forward biases", "its MLP has none")
    if (act := config.get("hidden_act", "silu")) not in ("silu", "swish"):
        raise refuse(where, f"hidden_act {act!r}", "the MLP is SwiGLU with silu")
    partial = config.get("partial_rotary_factor")
    partial = rope.get("partial_rotary_factor") if partial is None else partial
    if partial is not None and partial != 1:
        raise refuse(
            where, f"partial_rotary_factor {partial}", "RoPE rotates every dimension of a head"
        )
    for key in ("rope_scaling", "rope_parameters"):  # the loader takes either (transformers 4 / 5)
        part = config.get(key) or {}
        if (kind := part.get("rope_type", part.get("type"))) not in HF_ROPE_KINDS:
            raise refuse(where, f"rope type {kind!r} ({key})", "RoPE is default, llama3 or linear")
    if sliding := _sliding_layers(config):
        raise refuse(
            where,
            f"sliding-window attention on {len(sliding[0])} of {config.get('num_hidden_layers')} "
            f"layers ({sliding[1]})",
            "every layer attends to the whole context",
        )
    for key in _EXPERT_KEYS:
        if config.get(key):
            raise refuse(where, f"{key} = {config[key]} (a mixture of experts)", "the MLP is dense")
    for key in _SOFTCAP_KEYS:
        if config.get(key) is not None:
            raise refuse(where, f"{key} = {config[key]}", "logits are not soft-capped")


def _sliding_layers(config: dict) -> tuple[list[int], str] | None:
    """The layers that attend within a window, and the keys that say so. Qwen2/Qwen3 configs carry
    sliding_window with use_sliding_window false: no window. transformers >= 4.5x writes layer_types;
    older ones slide the layers from max_window_layers on when use_sliding_window is true."""
    if types := config.get("layer_types"):
        layers = [i for i, t in enumerate(types) if t != "full_attention"]
        return (layers, "layer_types") if layers else None
    if config.get("use_sliding_window") and config.get("sliding_window"):
        first = config.get("max_window_layers") or 0
        layers = list(range(first, config.get("num_hidden_layers") or 0))
        if layers:
            return layers, (
                f"use_sliding_window true, max_window_layers {first}, "
                f"sliding_window {config['sliding_window']}"
            )
    return None


def gguf_rope_scaling(fields: dict, arch: str) -> dict | None:
    """ModelArgs.rope_scaling for a file's {arch}.rope.scaling.* (after check_gguf_fields): llama.cpp
    divides positions by rope.scaling.factor (older files: rope.scale_linear) unless the type is none."""
    kind = fields.get(f"{arch}.rope.scaling.type")
    factor = fields.get(f"{arch}.rope.scaling.factor", fields.get(f"{arch}.rope.scale_linear"))
    if kind == "none" or not factor or float(factor) == 1.0:
        return None
    return {"rope_type": "linear", "factor": float(factor)}


def check_gguf_fields(fields: dict, where: str) -> None:
    arch = fields.get("general.architecture", "?")
    n_heads = fields.get(f"{arch}.attention.head_count")
    dim = fields.get(f"{arch}.embedding_length")
    head_dim = fields.get(
        f"{arch}.attention.key_length", dim // n_heads if dim and n_heads else None
    )
    for key in ("rope.dimension_count", "attention.value_length"):
        got = fields.get(f"{arch}.{key}")
        if got is not None and head_dim is not None and int(got) != int(head_dim):
            raise refuse(
                where,
                f"{arch}.{key} = {int(got)}, not the head size {int(head_dim)}",
                "RoPE rotates every dimension of a head and values are as wide as keys",
            )
    if (scaling := fields.get(f"{arch}.rope.scaling.type")) not in GGUF_ROPE_SCALINGS:
        raise refuse(
            where, f"{arch}.rope.scaling.type {scaling!r}", "RoPE scaling is none or linear"
        )
    if experts := fields.get(f"{arch}.expert_count"):
        raise refuse(
            where, f"{arch}.expert_count = {experts} (a mixture of experts)", "the MLP is dense"
        )
    if window := fields.get(f"{arch}.attention.sliding_window"):
        raise refuse(
            where,
            f"{arch}.attention.sliding_window = {window}: sliding-window attention",
            "every layer attends to the whole context",
        )
    for key in _SOFTCAP_KEYS:
        if (cap := fields.get(f"{arch}.{key}")) is not None:
            raise refuse(where, f"{arch}.{key} = {cap}", "logits are not soft-capped")


def check_tensors(names: Iterable[str], kind: str, n_layers: int, where: str) -> None:
    """Every tensor of the file is one loader.py reads (kind "hf" or "gguf")."""
    names = list(names)
    if kind == "gguf" and "blk.0.ffn_up.bias" in names:
        raise refuse(where, "feed-forward biases (ffn_*.bias)", "its MLP has none")
    read = _HF_READ if kind == "hf" else _GGUF_READ
    extra = sorted(
        n
        for n in names
        if not ((m := read.fullmatch(n)) and (m[1] is None or int(m[1]) < n_layers))
    )
    if extra:
        raise refuse(
            where,
            f"tensor {extra[0]!r} that paraspec's loader does not read ({len(extra)} such)",
            "it reads the weights of a Llama / Qwen2 / Qwen3 decoder",
        )


def check_loaded(loaded: Any) -> None:
    """The checks above on a checkpoint.LoadedModel's kept metadata and tensor names."""
    kind = loaded.tokenizer_source.get("kind")
    if kind == "hf":
        check_hf_config(loaded.metadata, str(loaded.path / "config.json"))
        check_tensors(
            loaded.tensor_names, "hf", loaded.metadata.get("num_hidden_layers", 0), str(loaded.path)
        )
    else:
        check_gguf_fields(loaded.metadata, str(loaded.path))
        arch = loaded.metadata.get("general.architecture")
        check_tensors(
            loaded.tensor_names,
            "gguf",
            loaded.metadata.get(f"{arch}.block_count", 0),
            str(loaded.path),
        )
