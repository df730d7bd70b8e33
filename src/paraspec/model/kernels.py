"""Which compiled CPU kernels this process runs, decided from CPUID before any of them is imported.

Our machines differ (AVX-512 with BF16/VNNI, AVX2 + FMA only, ARM64), and a module compiled for
one instruction set must never be loaded on a CPU without it (that is a SIGILL at import). So the
kernels (csrc/: decode/verify attention and the W8A8 linear) are built once per ISA as separate
extension modules, and a module is imported only when this CPU has every feature it needs:

    avx512  paraspec.model._kernels_avx512   AVX-512F/BW/VL + AVX512-VNNI + FMA (variant amx: GGUF
                                             calls of 20+ sub-rows on AMX int8 tiles, where CPUID has them)
    avx2    paraspec.model._kernels_avx2     AVX2 + FMA (W8A8 with AVX-VNNI where the CPU has it; GGUF
                                             calls of 3+ sub-rows on wide tiles over unpacked blocks)
    torch   no compiled code                 torch attention (fp64 sums), quant.int_dot W8A8

Every path is row-invariant, so parallel decoding is exact on each; they differ in speed and in
the low bits (a path is compared with itself). The best runnable path is used unless
PARASPEC_KERNELS names another: `auto`, `avx512`, `avx2`, `torch`, or `ISA:VARIANT` to pick a
W8A8 inner loop (e.g. `avx2:avx2` skips AVX-VNNI). A path this machine cannot run is never an
error: one log line says which path runs instead and why.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

from ..errors import ConfigError

logger = logging.getLogger("paraspec.kernels")

ENV = "PARASPEC_KERNELS"
ISAS = ("avx512", "avx2")  # best first
PATHS = (*ISAS, "torch")
VERSION = 22  # csrc modules' VERSION this code calls
# cpu_supported()
REQUIRES = {
    "avx512": frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_vnni", "fma"}),  # as csrc's
    "avx2": frozenset({"avx2", "fma", "f16c"}),
}
SHOWN = (
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimddp",
    "sve",
    "bf16",
)

# numpy's runtime dispatcher reads CPUID (and XGETBV, so OS support is included); its names -> Linux's
_NUMPY_NAMES = {
    "AVX2": "avx2",
    "FMA3": "fma",
    "F16C": "f16c",
    "AVX512F": "avx512f",
    "AVX512BW": "avx512bw",
    "AVX512VL": "avx512vl",
    "AVX512DQ": "avx512dq",
    "AVX512VNNI": "avx512_vnni",
    "AVX512BF16": "avx512_bf16",
    "AVX512FP16": "avx512_fp16",
    "ASIMD": "asimd",
    "ASIMDDP": "asimddp",
    "ASIMDHP": "asimdhp",
    "SVE": "sve",
    "BF16": "bf16",
}


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


@functools.cache
def cpu_features() -> frozenset[str]:
    """The CPU features this process may use, in Linux's /proc/cpuinfo spelling.

    From CPUID, not from /proc/cpuinfo: a VM or an emulator may show its host's flags there.
    numpy's dispatcher and torch's cpuinfo both read CPUID; a feature counts only where neither
    denies it (AMX and AVX-VNNI, which numpy does not report, come from torch and the module)."""
    feats: set[str] = set()
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as npf  # numpy >= 2
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as npf  # numpy 1.x
        except ImportError:
            npf = {}
    feats |= {_NUMPY_NAMES[k] for k, on in npf.items() if on and k in _NUMPY_NAMES}
    cpu = getattr(torch, "cpu", None)

    def torch_says(name: str) -> bool | None:
        fn = getattr(cpu, name, None)
        try:
            return None if fn is None else bool(fn())
        except Exception:  # a private helper that changed: no opinion
            return None

    if is_x86():
        if not npf:  # no numpy opinion: torch's alone (it has no separate FMA bit; AVX2 CPUs all have FMA and F16C)
            if torch_says("_is_avx2_supported"):
                feats |= {"avx2", "fma", "f16c"}
            if torch_says("_is_avx512_supported"):
                feats |= {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
            if torch_says("_is_vnni_supported"):
                feats.add("avx512_vnni")
            if torch_says("_is_avx512_bf16_supported"):
                feats.add("avx512_bf16")
        if torch_says("_is_avx2_supported") is False:
            feats -= {"avx2", "fma", "f16c"}
        if torch_says("_is_avx512_supported") is False:
            feats = {f for f in feats if not f.startswith("avx512")}
        if torch_says("_is_amx_tile_supported"):
            feats |= {"amx_tile", "amx_bf16"}
    return frozenset(feats)


@dataclass(frozen=True)
class Kernels:
    """The compiled kernels a model runs: one ISA's module, or none (the torch paths)."""

    name: str  # "avx512" | "avx2" | "torch"
    module: ModuleType | None = None
    w8a8_variant: str = ""  # the module's W8A8 inner loop ("" for torch)

    @property
    def label(self) -> str:
        return f"{self.name}:{self.w8a8_variant}" if self.w8a8_variant else self.name

    @property
    def attention(self):
        """csrc attention(q, k, v, start, visible, scale), or None for the torch path."""
        return None if self.module is None else self.module.attention

    @property
    def rope_attention(self):
        """csrc rope_attention(qkv, cos, sin, k, v, length, start, visible, scale, order=None)
        (rotary, the cache write and attention in one call), or None for the torch path."""
        return None if self.module is None else self.module.rope_attention

    def w8a8_linear(self, *args, **kwargs):
        return self.module.w8a8_linear(*args, variant=self.w8a8_variant, **kwargs)


def resolve_activation_passes(
    passes: int | str | None, kernels: Kernels, quantization: str | None
) -> int:
    """The int8 activation passes of the model's GGUF / W8A8 linears (ggml.py, quant.py).

    1: one Q8 step per 32-block, llama.cpp's numerics; 2: its rounding residual quantised again
    (closer to fp32, twice the integer work of every row). "auto": one pass for GGUF blocks on the
    compiled kernels: the quality llama.cpp gives the same file (perplexity within 0.5 % of
    llama.cpp's, benchmarks/gguf_quality_gate.py), while the second pass makes every verify row
    up to twice as dear (a Qwen2.5-1.5B-shape Q4_K_M on avx512:vnni512: t(16)/t(1) 6.4 with two,
    3.0 with one). The torch reference keeps two. W8A8 (one scale per row, much coarser than per
    32-block) keeps two on "auto" (its one pass costs 4 % perplexity)."""
    if passes in (None, "auto"):
        return 1 if quantization == "gguf" and kernels.module is not None else 2
    return int(passes)  # 1 or 2: EngineArgs checks a user's value (engine_args.py)


TORCH = Kernels("torch")


@functools.cache
def _load(isa: str) -> tuple[ModuleType | None, str]:
    """(module, "") when this CPU can run the ISA's module and it is built; else (None, why)."""
    if not is_x86():
        return None, f"{platform.machine()} is not x86-64"
    missing = sorted(REQUIRES[isa] - cpu_features())
    if missing:  # decided before the import: loading it would already execute its instructions
        return None, f"this CPU lacks {' '.join(missing)}"
    built_for = _built_for(isa)
    # its C++ ABI is another torch's
    if built_for and _minor(built_for) != _minor(torch.__version__):
        return None, f"built against torch {built_for}, this is torch {torch.__version__}"
    try:
        module = importlib.import_module(f"paraspec.model._kernels_{isa}")
    except ImportError as e:
        return None, "not built" if isinstance(e, ModuleNotFoundError) else f"does not load ({e})"
    if getattr(module, "VERSION", None) != VERSION:
        return None, f"a stale build (VERSION {getattr(module, 'VERSION', None)}, want {VERSION})"
    if not module.cpu_supported():
        return None, "its own CPUID check refuses this CPU"
    return module, ""


def _built_for(isa: str) -> str | None:
    """The torch version the ISA's module was compiled against (csrc/build.py writes it beside it)."""
    try:
        return (Path(__file__).with_name(f"_kernels_{isa}.torch")).read_text().strip() or None
    except OSError:
        return None


def _minor(version: str) -> tuple[str, ...]:
    return tuple(version.split("+")[0].split(".")[:2])


def why_not(isa: str) -> str:
    """Why the ISA's kernels do not run here ("" if they do)."""
    return _load(isa)[1]


def runnable() -> list[Kernels]:
    """Every kernel path this machine can execute (each W8A8 variant too), best first; torch last.
    The exactness tests run on all of them."""
    return _runnable_from(ISAS[0])


def choose(spec: str | None = None) -> Kernels:
    """The kernels for `spec` ("auto", an ISA, "ISA:VARIANT", "torch"; None: $PARASPEC_KERNELS or
    "auto"). A path this machine cannot run falls back to the best one below it, with a log line."""
    source = "argument" if spec is not None else ENV
    spec = (spec if spec is not None else os.environ.get(ENV, "")).strip().lower() or "auto"
    isa, _, variant = spec.partition(":")
    if isa not in ("auto", *PATHS) or (variant and isa in ("auto", "torch")):
        raise ConfigError(
            f"{ENV}={spec!r} is not a kernel path; use auto, avx512, avx2 or torch "
            "(or avx512:VARIANT / avx2:VARIANT)"
            if source == ENV
            else f"kernels={spec!r} is not a kernel path; use auto, avx512, avx2 or torch"
        )
    if isa == "torch":  # nothing compiled is even imported
        return TORCH
    paths = runnable() if isa == "auto" else _runnable_from(isa)
    if isa == "auto":
        return paths[0]
    candidates = [k for k in paths if k.name == isa and (not variant or k.w8a8_variant == variant)]
    if candidates:
        return candidates[0]
    same_isa = [k for k in paths if k.name == isa]  # a variant it lacks: the ISA's best one
    pick = same_isa[0] if same_isa else next(k for k in paths if k.name != isa)
    why = why_not(isa)
    if not why and variant:
        why = f"this CPU runs only W8A8 variants {', '.join(_load(isa)[0].w8a8_variants())}"
    logger.warning(
        "paraspec: %s=%s cannot run here (%s); using the %s kernels", ENV, spec, why, pick.label
    )
    return pick


def _runnable_from(isa: str) -> list[Kernels]:
    """runnable(), from `isa` down: a path above the one asked for is not imported."""
    out = []
    for name in ISAS[ISAS.index(isa) :]:
        module = _load(name)[0]
        if module is not None:
            out += [Kernels(name, module, v) for v in module.w8a8_variants()]
    return out + [TORCH]


@functools.cache
def default() -> Kernels:
    """The process's kernels (chosen once). One log line says which and, for a fallback, why."""
    picked = choose()
    if picked is TORCH and is_x86() and os.environ.get(ENV, "auto").strip().lower() != "torch":
        reasons = "; ".join(f"{isa}: {why_not(isa)}" for isa in ISAS)
        fix = (
            " (build them: `make install` in a checkout, or reinstall paraspec, see docs/install.md)"
            if any(
                why_not(isa).startswith(("not built", "a stale", "built against")) for isa in ISAS
            )
            else ""
        )
        logger.warning(
            "paraspec: no compiled CPU kernels run (%s); decoding takes the torch paths, exact "
            "but slower%s",
            reasons,
            fix,
        )
    else:
        logger.info("paraspec: CPU kernels %s", picked.label)
    return picked


@dataclass(frozen=True)
class Numerics:
    """What a model's matmuls run in: the weights' dtype and an optional quantisation."""

    dtype: str  # "bfloat16" | "float32"
    quantization: str | None  # None | "w8a8" | "gguf"
    why: str = ""


def default_numerics(kernels: Kernels | None = None) -> Numerics:
    """The fastest exact numerics on this CPU that stay within the W8A8 quality gate (perplexity
    within 2% of bf16; +0.25% on the bundled model; benchmarks/gguf_quality_gate.py prints w8a8's).

    Decoding 1-16 rows is bound by the bytes of weights a step streams, and the compiled linears
    (csrc) read bf16 weights by widening them to fp32, with or without hardware bf16: so where
    a compiled W8A8 kernel runs, int8 weights (half of bf16's bytes) are the fastest on every
    x86 CPU we have measured (`paraspec info --numerics` times them on this one). Without
    compiled kernels (ARM64, pre-AVX2), bf16: half of fp32's bytes, through torch.
    """
    kernels = kernels or default()
    if kernels.module is not None:
        return Numerics(
            "bfloat16",
            "w8a8",
            f"the {kernels.label} W8A8 kernel streams int8 weights, half of bf16's bytes",
        )
    return Numerics(
        "bfloat16", None, "no compiled kernels: bf16 through torch, half of fp32's bytes"
    )


def gguf_numerics(kernels: Kernels) -> Numerics:
    """A GGUF file's own Q4_0 / Q4_1 / Q5_0 / Q8_0 / Q4_K / Q6_K blocks (ggml.py): fewer bytes a step than int8."""
    return Numerics(
        "bfloat16",
        "gguf",
        f"the GGUF file's own blocks through the {kernels.label} kernels: "
        "the fewest bytes a decode step streams",
    )


def resolve_numerics(
    dtype: str | None,
    quantization: str | None,
    kernels: Kernels | None = None,
    gguf_file: bool = False,
) -> Numerics:
    """A user's dtype / quantization, "auto" (or None for dtype) filled in for this CPU.

    dtype "auto" with quantization "auto" or unset: a GGUF file runs its own blocks where a
    compiled kernel runs (gguf_numerics), anything else default_numerics(). An explicit dtype
    keeps its meaning: fp32 stays fp32 (a GGUF file is dequantised) unless a quantization is
    asked for too. quantization "none" disables it; "gguf" needs a .gguf model."""
    q = None if quantization in (None, "", "none") else quantization
    if q == "gguf" and not gguf_file:
        raise ConfigError(
            "quantization='gguf' runs a .gguf file's own blocks, and this model is not a "
            ".gguf file; use 'w8a8', 'none' or 'auto'"
        )
    kernels = kernels or default()
    if dtype in (None, "auto"):
        if quantization in ("auto", None):
            return (
                gguf_numerics(kernels)
                if gguf_file and kernels.module is not None
                else default_numerics(kernels)
            )
        return Numerics("bfloat16", q, "quantization chosen by the caller")
    return Numerics(dtype, None if q == "auto" else q, "chosen by the caller")
