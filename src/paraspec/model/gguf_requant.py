"""Re-quantise a GGUF file with llama.cpp's own quantiser (llama-cpp-python, an optional peer).

The gguf package cannot make K-quants (its quantize() raises NotImplementedError for Q4_K/Q6_K),
so K-quant files for tests and benchmarks come from llama.cpp itself:

    to_f32(src, dst)                     every tensor dequantised to F32, metadata kept
    llamacpp_quantize(src, dst, "Q4_K_M") llama_model_quantize (pure=True: one type everywhere)

Nothing here is used at inference time.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

# llama.cpp's llama_ftype values
FTYPES = {
    "Q4_0": 2,
    "Q4_1": 3,
    "Q8_0": 7,
    "Q5_0": 8,
    "Q5_1": 9,
    "Q4_K_S": 14,
    "Q4_K_M": 15,
    "Q5_K_S": 16,
    "Q5_K_M": 17,
    "Q6_K": 18,
}


def have_llamacpp() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def to_f32(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """A copy of the GGUF file `src` with every tensor dequantised to F32 (what llama.cpp
    quantises from; requantising a quantised file would need allow_requantize)."""
    import gguf

    from .gguf_file import read_gguf

    reader = read_gguf(src)
    w = gguf.GGUFWriter(str(dst), reader.fields["general.architecture"])
    for key, value in reader.fields.items():
        if key != "general.architecture":  # written by the writer itself
            w.add_key_value(key, value, *reader.types[key])
    for t in reader.tensors.values():
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        w.add_tensor(
            t.name,
            np.ascontiguousarray(a, dtype=np.float32).reshape([int(d) for d in reversed(t.shape)]),
        )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(dst)


def llamacpp_quantize(
    src: str | os.PathLike, dst: str | os.PathLike, ftype: str, pure: bool = False, threads: int = 2
) -> Path:
    """llama.cpp's quantiser on an F32/F16 GGUF file: ftype one of FTYPES (e.g. "Q4_K_M");
    pure: every 2-D tensor in that type (no mixture; llama.cpp still falls back where a row is
    not a multiple of the type's block). Raises ImportError without llama-cpp-python."""
    if ftype not in FTYPES:
        raise ValueError(f"ftype {ftype!r} is not one of {', '.join(FTYPES)}")
    import llama_cpp

    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype, p.nthread, p.pure = FTYPES[ftype], threads, pure
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), p)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({src} -> {ftype}) failed with {rc}")
    return Path(dst)


def cached_kquant_model(ftype: str = "Q4_K_M", cache: str | os.PathLike | None = None) -> Path:
    """The bundled SmolLM2 model requantised by llama.cpp to `ftype` (from its F32 dequantisation),
    made once into ~/.cache/paraspec (never committed: a model file)."""
    from .loader import default_model_path

    base = default_model_path()
    out_dir = Path(cache or Path.home() / ".cache" / "paraspec")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{Path(base).stem.rsplit('.', 1)[0]}.{ftype}.gguf"
    if not out.exists():
        f32 = out_dir / f"{Path(base).stem}.f32.tmp.gguf"
        to_f32(base, f32)
        try:
            llamacpp_quantize(f32, str(out) + ".tmp", ftype)
            os.replace(str(out) + ".tmp", out)
        finally:
            f32.unlink(missing_ok=True)
    return out


def bench_model(name: str) -> str:
    """A benchmark's --model: "q4_k_m" / "q6_k" / ... (a key of FTYPES, any case) is the bundled
    model requantised by llama.cpp (cached_kquant_model); anything else is returned as given."""
    up = name.upper()
    return str(cached_kquant_model(up)) if up in FTYPES else name
