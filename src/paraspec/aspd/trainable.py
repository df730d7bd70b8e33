"""Which models `paraspec aspd train` fine-tunes: those whose math TrainModel (train.py) writes out.

TrainModel computes paraspec's forward (transformer.py) from the weight names loader.py makes:
Llama, Qwen2/2.5 (q/k/v biases) and Qwen3 (per-head q/k RMS norms), tied or untied heads, RoPE
default / llama3 / linear. A model whose file says more than those names and ModelArgs carry (a
tensor the loader does not read, partial RoPE, sliding-window attention, experts, another
activation, soft-capped logits, a RoPE scaling paraspec does not apply) would train a different
network than the one it is, without any error; check_trainable refuses it in one line instead.
"""
from __future__ import annotations

import re

import torch

from ..errors import ModelLoadError

TOP_WEIGHTS = ("tok_embeddings", "norm", "lm_head")
LAYER_WEIGHTS = ("attn_norm", "ffn_norm", "wqkv", "bqkv", "wo", "bo", "w_gate_up", "w_down", "q_norm", "k_norm")
ROPE_KINDS = (None, "default", "llama3", "linear", "freq_factors")   # what rope_tables computes
# the GGUF tensors loader._load_gguf reads (every other name is something paraspec would drop)
_GGUF_READ = re.compile(r"(token_embd|output_norm|output|rope_freqs)\.weight|blk\.\d+\.(attn_(q|k|v|output)\."
                        r"(weight|bias)|(attn_norm|ffn_norm|attn_q_norm|attn_k_norm|ffn_gate|ffn_up|ffn_down)\.weight)")
_FIX = "`paraspec aspd train` fine-tunes Llama / Qwen2 / Qwen3 decoders that paraspec's forward computes exactly"


def refuse(where: str, what: str) -> ModelLoadError:
    return ModelLoadError(f"{where}: {what}, which the ASPD training forward cannot represent; {_FIX} "
                          "(docs/aspd.md, Training): pick a model without it")


def check_weights(weights: dict, n_layers: int) -> None:
    """Every weight is a float tensor with a name TrainModel uses."""
    known = set(TOP_WEIGHTS) | {f"layers.{i}.{n}" for i in range(n_layers) for n in LAYER_WEIGHTS}
    for name, w in weights.items():
        if name not in known:
            raise refuse("the loaded weights", f"tensor {name!r}")
        if not isinstance(w, torch.Tensor):
            raise refuse("the loaded weights", f"{name!r} as {type(w).__name__} (load it dequantised, fp32)")


def check_trainable(loaded) -> None:
    """Refuse (ModelLoadError) a loaded model whose file has math TrainModel would leave out."""
    if loaded.tokenizer_source.get("kind") == "hf":
        _check_hf(loaded)
    else:
        _check_gguf(loaded.path)
    check_weights(loaded.weights, loaded.args.n_layers)


def _check_hf(loaded) -> None:
    from safetensors import safe_open

    from ..model.loader import _safetensors_files
    from .hf_folder import hf_tensors
    config = loaded.tokenizer_source["config"]
    where = str(loaded.path / "config.json")
    rope = {**(config.get("rope_scaling") or {}), **(config.get("rope_parameters") or {})}
    if (act := config.get("hidden_act", "silu")) not in ("silu", "swish"):
        raise refuse(where, f"hidden_act {act!r} (the MLP is SwiGLU with silu)")
    if (partial := config.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0))) != 1:
        raise refuse(where, f"partial_rotary_factor {partial} (RoPE rotates every dimension of a head)")
    if (kind := rope.get("rope_type", rope.get("type"))) not in ROPE_KINDS:
        raise refuse(where, f"rope type {kind!r} (RoPE is default, llama3 or linear)")
    if config.get("use_sliding_window") or any(t != "full_attention" for t in config.get("layer_types") or ()):
        raise refuse(where, "sliding-window attention (use_sliding_window / layer_types)")
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        if config.get(key):
            raise refuse(where, f"{key} = {config[key]} (a mixture of experts)")
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if config.get(key) is not None:
            raise refuse(where, f"{key} = {config[key]}")
    read = {k.removeprefix("model.") for k in hf_tensors(loaded.args, loaded.weights)} | {"lm_head.weight"}
    for f in _safetensors_files(loaded.path):
        with safe_open(str(f), "pt") as st:
            extra = sorted(k for k in st.keys() if k.removeprefix("model.") not in read
                           and not k.endswith("rotary_emb.inv_freq"))   # old checkpoints store the RoPE table
        if extra:
            raise refuse(str(f), f"tensor {extra[0]!r} that paraspec's loader does not read ({len(extra)} such)")


def _check_gguf(path) -> None:
    """The file's metadata and tensor names (read again: LoadedModel keeps neither; 3-4 s for the
    bundled model, whose tokenizer fields are most of it)."""
    import gguf

    from ..gc_pause import gc_paused
    with gc_paused():
        reader = gguf.GGUFReader(str(path))

    def field(key: str):
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    arch = field("general.architecture")
    if (scaling := field(f"{arch}.rope.scaling.type")) not in (None, "none"):
        raise refuse(str(path), f"{arch}.rope.scaling.type {scaling!r} (paraspec's loader does not apply it)")
    if experts := field(f"{arch}.expert_count"):
        raise refuse(str(path), f"{arch}.expert_count = {experts} (a mixture of experts)")
    extra = sorted(t.name for t in reader.tensors if not _GGUF_READ.fullmatch(t.name))
    if extra:
        raise refuse(str(path), f"tensor {extra[0]!r} that paraspec's loader does not read ({len(extra)} such)")
