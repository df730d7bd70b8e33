"""GGUF files with the shapes of real models and random weights: what decoding costs where a step
streams a gigabyte of weights (benchmarks/bandwidth_model.py measures on them).

A forward's cost depends on the shapes and block formats of its weights, not on their values, so
a file with Qwen2.5-1.5B's or Llama-3.2-3B's shapes and random blocks costs what the real model
does. The block formats follow llama.cpp's own choice for the file type (llama-quant.cpp):

    Q4_0    every matmul weight Q4_0; the LM head (here the tied token embedding) Q6_K
    Q4_K_M  Q4_K; attn_v and ffn_down Q6_K in the layers use_more_bits() picks; the LM head Q6_K
    a row length that is not a multiple of a K-quant's 256 falls back as llama.cpp's does:
    Q4_K -> Q5_0, Q6_K -> Q8_0 (Qwen2.5-0.5B's 896 columns)

pure=True writes every matmul weight in the base format (Q4_0 / Q4_K). Random blocks keep values
sane (standard deviation 0.02 from fixed block scales over uniform random quants; the mean is
within half a step of 0, where a format's grid is off centre, as Q4_0's -8..7), norms are 1,
so logits are finite. The tokenizer is the bundled SmolLM2's (49152 tokens, byte-level BPE)
padded with plain tokens to the shape's real vocabulary size: only the shapes matter for cost,
and the embedding and LM head keep their real size. Writing streams tensor by tensor (one
tensor's blocks in memory at a time; the largest, a 3B model's LM head, is ~320 MB).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..model.ggml import BLOCK_SIZE

QUANTS = ("Q4_0", "Q4_K_M")
FILE_TYPES = {"Q4_0": 2, "Q4_K_M": 15}  # llama.cpp's llama_ftype values
CACHE = Path.home() / ".cache" / "paraspec" / "synthetic"
STD = 0.02  # the weights' standard deviation


@dataclass(frozen=True)
class ModelShape:
    """What the cost of a forward depends on, as the model's config.json gives it."""

    name: str
    arch: str  # GGUF general.architecture
    dim: int  # hidden_size
    hidden_dim: int  # intermediate_size
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    tied: bool  # tie_word_embeddings: the LM head is the token embedding
    rope_theta: float
    norm_eps: float
    context_length: int
    qkv_bias: bool = False
    llama3_rope: tuple[float, float, float, int] | None = (
        None  # factor, low, high, original context
    )

    def scaled(self, layers: int | None = None, vocab: int | None = None) -> ModelShape:
        """The same shape with fewer layers or another vocabulary size (tests, quick checks)."""
        name = self.name + (f"-L{layers}" if layers else "") + (f"-V{vocab}" if vocab else "")
        return dataclasses.replace(
            self, name=name, n_layers=layers or self.n_layers, vocab_size=vocab or self.vocab_size
        )


# the models' config.json (Qwen/Qwen2.5-*-Instruct, meta-llama/Llama-3.2-*-Instruct)
SHAPES = {
    s.name: s
    for s in (
        ModelShape(
            "qwen2.5-0.5b",
            "qwen2",
            896,
            4864,
            24,
            14,
            2,
            64,
            151936,
            True,
            1e6,
            1e-6,
            32768,
            qkv_bias=True,
        ),
        ModelShape(
            "qwen2.5-1.5b",
            "qwen2",
            1536,
            8960,
            28,
            12,
            2,
            128,
            151936,
            True,
            1e6,
            1e-6,
            32768,
            qkv_bias=True,
        ),
        ModelShape(
            "llama-3.2-1b",
            "llama",
            2048,
            8192,
            16,
            32,
            8,
            64,
            128256,
            True,
            5e5,
            1e-5,
            131072,
            llama3_rope=(32.0, 1.0, 4.0, 8192),
        ),
        ModelShape(
            "llama-3.2-3b",
            "llama",
            3072,
            8192,
            28,
            24,
            8,
            128,
            128256,
            True,
            5e5,
            1e-5,
            131072,
            llama3_rope=(32.0, 1.0, 4.0, 8192),
        ),
    )
}


@dataclass(frozen=True)
class TensorPlan:
    name: str
    shape: tuple[int, ...]  # numpy order: (rows, columns) or (n,)
    kind: str  # "F32" or a block format of ggml.BLOCK_SIZE

    @property
    def nbytes(self) -> int:
        if self.kind == "F32":
            return 4 * math.prod(self.shape)
        values, nbytes = BLOCK_SIZE[self.kind]
        return math.prod(self.shape) // values * nbytes

    @property
    def matmul(self) -> bool:
        return self.kind != "F32"


def use_more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's pick of the layers whose attn_v / ffn_down Q4_K_M keeps in Q6_K."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}  # a row not a multiple of 256 values


def _kind(quant: str, role: str, layer: int, n_layers: int, cols: int, pure: bool) -> str:
    base = "Q4_0" if quant == "Q4_0" else "Q4_K"
    kind = base
    if not pure:
        if role == "output":
            kind = "Q6_K"
        elif (
            quant == "Q4_K_M" and role in ("attn_v", "ffn_down") and use_more_bits(layer, n_layers)
        ):
            kind = "Q6_K"
    if cols % BLOCK_SIZE[kind][0]:
        kind = FALLBACK.get(kind, kind)
    if cols % BLOCK_SIZE[kind][0]:
        raise ValueError(f"{cols} columns are not a whole number of {kind} blocks")
    return kind


def tensor_plan(shape: ModelShape, quant: str, pure: bool = False) -> list[TensorPlan]:
    """Every tensor of the file, in the order written: names as llama.cpp's converter writes them."""
    if quant not in QUANTS:
        raise ValueError(f"quant {quant!r} is not one of {', '.join(QUANTS)}")
    s, n = shape, shape.n_layers
    q, kv = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim

    def mm(name: str, role: str, rows: int, cols: int, layer: int = 0) -> TensorPlan:
        return TensorPlan(name, (rows, cols), _kind(quant, role, layer, n, cols, pure))

    out = [mm("token_embd.weight", "output" if s.tied else "token_embd", s.vocab_size, s.dim)]
    if s.llama3_rope:
        out.append(TensorPlan("rope_freqs.weight", (s.head_dim // 2,), "F32"))
    for i in range(n):
        b = f"blk.{i}."
        out.append(TensorPlan(b + "attn_norm.weight", (s.dim,), "F32"))
        out += [
            mm(b + "attn_q.weight", "attn_q", q, s.dim, i),
            mm(b + "attn_k.weight", "attn_k", kv, s.dim, i),
            mm(b + "attn_v.weight", "attn_v", kv, s.dim, i),
        ]
        if s.qkv_bias:
            out += [
                TensorPlan(b + f"attn_{p}.bias", (rows,), "F32")
                for p, rows in (("q", q), ("k", kv), ("v", kv))
            ]
        out += [
            mm(b + "attn_output.weight", "attn_output", s.dim, q, i),
            TensorPlan(b + "ffn_norm.weight", (s.dim,), "F32"),
            mm(b + "ffn_gate.weight", "ffn_gate", s.hidden_dim, s.dim, i),
            mm(b + "ffn_up.weight", "ffn_up", s.hidden_dim, s.dim, i),
            mm(b + "ffn_down.weight", "ffn_down", s.dim, s.hidden_dim, i),
        ]
    out.append(TensorPlan("output_norm.weight", (s.dim,), "F32"))
    if not s.tied:
        out.append(mm("output.weight", "output", s.vocab_size, s.dim))
    return out


def _fp16(x: float) -> np.ndarray:
    return np.array([x], np.float16).view(np.uint8)


# per format: the (offset, bytes) fields set to fixed values so that value = scale * (q - centre)
# has standard deviation STD over uniform random q (the rest of each block stays random)
#   Q4_0: d (q - 8), q 0..15 (std 4.61)     Q5_0: d (q - 16), q 0..31 (std 9.23)
#   Q8_0: d q, q int8 (std 73.9)            Q4_K: sc = mn = 16 for every 32-block, dmin = 7.5 d:
#   16 d (q - 7.5)                          Q6_K: sc = 8 for every 16-block: 8 d (q - 32), q 0..63 (std 18.5)
_Q4K_SCALES = np.array([0x50] * 8 + [0] * 4, np.uint8)  # six-bit sc, mn = 16 (get_scale_min_k4)


def _fixed_fields(kind: str) -> list[tuple[int, np.ndarray]]:
    if kind == "Q4_0":
        return [(0, _fp16(STD / 4.61))]
    if kind == "Q5_0":
        return [(0, _fp16(STD / 9.23))]
    if kind == "Q8_0":
        return [(0, _fp16(STD / 73.9))]
    if kind == "Q4_K":
        d = STD / (16 * 4.61)
        return [(0, _fp16(d)), (2, _fp16(7.5 * d)), (4, _Q4K_SCALES)]
    if kind == "Q6_K":
        return [(192, np.full(16, 8, np.uint8)), (208, _fp16(STD / (8 * 18.47)))]
    raise ValueError(f"no random blocks for {kind}")


def random_tensor(t: TensorPlan, rng: np.random.Generator) -> np.ndarray:
    """The tensor's data as written: fp32 values, or uint8 rows of random blocks."""
    if t.kind == "F32":
        if t.name.endswith(".bias"):
            return (rng.standard_normal(t.shape, np.float32) * STD).astype(np.float32)
        return np.ones(t.shape, np.float32)  # norms (rope_freqs: set by the writer)
    values, nbytes = BLOCK_SIZE[t.kind]
    rows, cols = t.shape
    blocks = rng.integers(0, 256, (rows * cols // values, nbytes), dtype=np.uint8)
    for offset, field in _fixed_fields(t.kind):
        blocks[:, offset : offset + len(field)] = field
    return blocks.reshape(rows, cols // values * nbytes)


def llama3_rope_factors(shape: ModelShape) -> np.ndarray:
    """rope_freqs.weight as llama.cpp's converter computes it for rope_type llama3."""
    factor, low, high, original = shape.llama3_rope
    freqs = 1.0 / shape.rope_theta ** (
        np.arange(0, shape.head_dim, 2, dtype=np.float64) / shape.head_dim
    )
    wavelen = 2 * math.pi / freqs
    smooth = (original / wavelen - low) / (high - low)
    mid = 1 / ((1 - smooth) / factor + smooth)
    out = np.where(wavelen < original / high, 1.0, np.where(wavelen > original / low, factor, mid))
    return out.astype(np.float32)


@functools.lru_cache(maxsize=1)
def _bundled_tokenizer() -> tuple[tuple[str, object, object, object], ...]:
    from ..gc_pause import gc_paused
    from ..model.gguf_file import read_gguf
    from ..model.loader import default_model_path

    with gc_paused():  # the vocabulary's ~0.1 M strings (loader.py says why)
        g = read_gguf(default_model_path())
    return tuple(
        (key, value, *g.types[key])
        for key, value in g.fields.items()
        if key.startswith("tokenizer.")
    )


def tokenizer_fields(vocab_size: int) -> list[tuple[str, object, object, object]]:
    """(key, value, type, sub_type) of the bundled SmolLM2 tokenizer, padded to vocab_size tokens."""
    out = []
    for name, value, vtype, sub in _bundled_tokenizer():
        if name in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            if len(value) > vocab_size:
                raise ValueError(
                    f"vocab_size {vocab_size} is below the bundled tokenizer's {len(value)} tokens"
                )
            pad = range(len(value), vocab_size)
            value = value + (
                [f"[PAD{i}]" for i in pad] if name.endswith("tokens") else [1] * len(pad)
            )
        out.append((name, value, vtype, sub))
    return out


def default_path(shape: ModelShape, quant: str, pure: bool = False) -> Path:
    return CACHE / f"{shape.name}.{quant}{'-pure' if pure else ''}.gguf"


def write_synthetic(
    path: str | os.PathLike, shape: ModelShape, quant: str, seed: int = 0, pure: bool = False
) -> Path:
    """Write the synthetic GGUF file of `shape` in `quant` (module doc) to path, tensor by tensor."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    plan = tensor_plan(shape, quant, pure)
    tmp = path.with_name(path.name + ".tmp")
    a = shape.arch
    w = gguf.GGUFWriter(str(tmp), a)
    w.add_string(
        "general.name", f"synthetic {shape.name} {quant}{' pure' if pure else ''} (random weights)"
    )
    w.add_uint32("general.file_type", FILE_TYPES[quant])
    w.add_uint32("general.quantization_version", 2)
    for key, value in (
        ("block_count", shape.n_layers),
        ("context_length", shape.context_length),
        ("embedding_length", shape.dim),
        ("feed_forward_length", shape.hidden_dim),
        ("attention.head_count", shape.n_heads),
        ("attention.head_count_kv", shape.n_kv_heads),
        ("attention.key_length", shape.head_dim),
        ("attention.value_length", shape.head_dim),
        ("rope.dimension_count", shape.head_dim),
        ("vocab_size", shape.vocab_size),
    ):
        w.add_uint32(f"{a}.{key}", value)
    w.add_float32(f"{a}.rope.freq_base", shape.rope_theta)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", shape.norm_eps)
    for key, value, vtype, sub in tokenizer_fields(shape.vocab_size):
        w.add_key_value(key, value, vtype, sub_type=sub)
    for t in plan:
        if t.kind == "F32":
            w.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes)
        else:
            rows, cols = t.shape
            byte_shape = (rows, cols // BLOCK_SIZE[t.kind][0] * BLOCK_SIZE[t.kind][1])
            w.add_tensor_info(
                t.name,
                byte_shape,
                np.dtype(np.uint8),
                t.nbytes,
                raw_dtype=getattr(gguf.GGMLQuantizationType, t.kind),
            )
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for i, t in enumerate(plan):
            # a generator per tensor: any one of them is reproducible on its own
            data = (
                llama3_rope_factors(shape)
                if t.name == "rope_freqs.weight"
                else random_tensor(t, np.random.default_rng([seed, i]))
            )
            w.write_tensor_data(data)
            del data
    finally:
        w.close()
    os.replace(tmp, path)
    return path


def weight_bytes(plan: list[TensorPlan], tied: bool) -> int:
    """Bytes of weights one decode step streams: every matmul weight once (a tied embedding as the
    LM head; the embedding lookup reads one row, not counted)."""
    total = sum(t.nbytes for t in plan if t.matmul)
    embd = next(t for t in plan if t.name == "token_embd.weight")
    return total if tied else total - embd.nbytes
