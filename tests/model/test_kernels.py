"""The compiled CPU kernels (csrc/, one module per ISA), called directly: attention against the
torch reference and its row invariance, W8A8 against quant.py's torch path (int_dot) bit for bit,
the fp32/bf16 linear against a float64 reference and its row invariance, the ISAs against each
other, and import safety on a CPU without AVX-512 (under qemu).

Every module that is built and that this CPU runs is tested, with every W8A8 inner loop it offers;
the others show as skips saying why.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import numpy as np
import pytest
import torch

from paraspec.model import ggml, quant
from paraspec.model.args import ModelArgs
from paraspec.model.kernels import TORCH, VERSION, Kernels, cpu_features
from paraspec.model.kv_cache import KVCache
from paraspec.model.attention import attention as torch_attention, attention_bias
from paraspec.model.rope import apply_rope, rope_tables

ISAS = ("avx512", "avx2")


def _load(isa: str) -> tuple[ModuleType | None, str]:
    try:
        m = importlib.import_module(f"paraspec.model._kernels_{isa}")
    except ImportError as e:
        return None, f"_kernels_{isa} is not built ({e})"
    if getattr(m, "VERSION", None) != VERSION:
        return None, f"_kernels_{isa} is a stale build (VERSION {getattr(m, 'VERSION', None)})"
    if not m.cpu_supported():
        return None, f"this CPU lacks instructions _kernels_{isa} needs"
    return m, ""


MODULES = {isa: _load(isa) for isa in ISAS}
RUNNABLE = {isa: m for isa, (m, _) in MODULES.items() if m is not None}


def per_isa() -> list:
    return [
        pytest.param(isa, id=isa, marks=() if m else pytest.mark.skip(reason=why))
        for isa, (m, why) in MODULES.items()
    ]


def per_variant() -> list:
    out = [
        pytest.param(isa, v, id=f"{isa}:{v}")
        for isa, m in RUNNABLE.items()
        for v in m.w8a8_variants()
    ]
    return out + [
        pytest.param(isa, "", id=isa, marks=pytest.mark.skip(reason=why))
        for isa, (m, why) in MODULES.items()
        if m is None
    ]


@contextmanager
def threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


# ---------------------------------------------------------------------------------- attention

KV_DTYPES = pytest.mark.parametrize(
    "kv_dtype", [torch.float32, torch.float16], ids=["kv32", "kv16"]
)


def _cache(
    hd: int,
    kv: int,
    group: int,
    start: int,
    n_new: int,
    seed: int,
    kv_dtype: torch.dtype = torch.float32,
) -> KVCache:
    """A one-layer cache with random K/V in slots [0, start + n_new) and `start` committed."""
    args = ModelArgs(
        arch="llama",
        vocab_size=16,
        dim=hd * kv * group,
        n_layers=1,
        n_heads=kv * group,
        n_kv_heads=kv,
        head_dim=hd,
        hidden_dim=16,
    )
    cache = KVCache(args, start + n_new, kv_dtype)
    g = torch.Generator().manual_seed(seed)
    n = start + n_new
    cache.k[0, :, :n] = torch.randn(kv, n, hd, generator=g)
    cache.v[0, :, :n] = torch.randn(kv, n, hd, generator=g)
    cache.length = start
    return cache


def _tree(n: int, seed: int) -> torch.Tensor:
    """An ancestor mask of a random tree over n nodes (node 0 the root, parents before children)."""
    g = torch.Generator().manual_seed(seed)
    parent = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]
    vis = torch.eye(n, dtype=torch.bool)
    for i in range(1, n):
        vis[i] |= vis[parent[i]]
    return vis


def _run(
    mod: ModuleType, q: torch.Tensor, cache: KVCache, mask: torch.Tensor | None
) -> torch.Tensor:
    visible = torch.empty(0, dtype=torch.bool) if mask is None else mask
    return mod.attention(
        q.contiguous(), cache.k[0], cache.v[0], cache.length, visible, q.shape[-1] ** -0.5
    )


@pytest.mark.parametrize("isa", per_isa())
@pytest.mark.parametrize("hd,group", [(64, 1), (64, 3), (32, 2), (32, 4), (80, 2), (36, 3)])
@KV_DTYPES
def test_attention_matches_torch_reference(isa, hd, group, kv_dtype):
    mod = RUNNABLE[isa]
    kv, start, n = 2, 45, 9
    cache = _cache(hd, kv, group, start, n, seed=hd + group, kv_dtype=kv_dtype)
    q = torch.randn(n, kv * group, hd, generator=torch.Generator().manual_seed(3))
    for mask in (None, _tree(n, seed=group)):
        want = torch_attention(q, cache, 0, attention_bias(cache, n, mask, group), hd**-0.5)
        torch.testing.assert_close(_run(mod, q, cache, mask), want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("isa", per_isa())
@pytest.mark.parametrize(
    "hd,group,start,n",
    [
        (64, 1, 37, 16),
        (64, 2, 37, 16),
        (64, 3, 37, 16),
        (64, 4, 37, 16),
        (32, 3, 37, 16),
        (36, 2, 37, 16),
        (64, 3, 301, 20),
        (36, 2, 333, 17),
        (64, 3, 50, 7),
        (128, 1, 40, 9),
    ],
)
@KV_DTYPES
def test_attention_row_invariance(isa, hd, group, start, n, kv_dtype):
    """A row's output bits do not depend on the other rows, its place among them, the gaps a
    tree mask leaves between its keys, or the thread count: each row equals the one-row call
    over a compacted cache holding exactly its visible keys (its autoregressive twin). The
    longer cases cross the V sum's chunks of committed keys and a row block of 16+ rows. Many
    rows score the committed keys with the keys in lanes (scores_keys: blocks of 32 and 16 keys,
    an odd pair count, hd 64 and 128), their twins one key at a time: the two must agree."""
    mod = RUNNABLE[isa]
    kv = 2
    cache = _cache(hd, kv, group, start, n, seed=7 * group + hd, kv_dtype=kv_dtype)
    q = torch.randn(n, kv * group, hd, generator=torch.Generator().manual_seed(11))
    mask = _tree(n, seed=5)
    assert any(not mask[i, : i + 1].all() for i in range(n)), "the tree should leave gaps"
    with threads(2):
        chain, tree = _run(mod, q, cache, None), _run(mod, q, cache, mask)
    with threads(1):
        assert torch.equal(_run(mod, q, cache, None), chain) and torch.equal(
            _run(mod, q, cache, mask), tree
        )
    for i in range(n):
        for out, seen in (
            (chain, list(range(i + 1))),
            (tree, mask[i].nonzero().flatten().tolist()),
        ):
            # [0, start), seen
            twin = _cache(hd, kv, group, start + len(seen) - 1, 1, seed=0, kv_dtype=kv_dtype)
            slots = list(range(start)) + [start + j for j in seen]
            twin.k[0, :, : len(slots)] = cache.k[0, :, slots]
            twin.v[0, :, : len(slots)] = cache.v[0, :, slots]
            alone = _run(mod, q[i : i + 1], twin, None)
            assert torch.equal(alone[0], out[i]), f"row {i} of {n} differs from its one-row twin"


@pytest.mark.parametrize("isa", per_isa())
@pytest.mark.parametrize("hd", [64, 36])
@KV_DTYPES
def test_rope_attention_is_rope_write_attention(isa, hd, kv_dtype):
    """One call (RoPE of q and k, their cache write, attention) gives the bits of the three steps
    as the torch forward spells them (apply_rope, KVCache.write, the kernel's attention), cache
    included (an fp16 cache: the kernel rounds K and V as torch's assignment does); q passed to
    attention as a row-strided slice of the rotated projections."""
    mod = RUNNABLE[isa]
    kv, group, start, n = 2, 3, 40, 7
    heads = kv * group
    fused = _cache(hd, kv, group, start, n, seed=1, kv_dtype=kv_dtype)
    steps = _cache(hd, kv, group, start, n, seed=1, kv_dtype=kv_dtype)
    qkv = torch.randn(n, heads + 2 * kv, hd, generator=torch.Generator().manual_seed(2))
    cos, sin = rope_tables(fused.args, 128)
    pos = torch.arange(start, start + n)
    cos, sin = cos[pos].unsqueeze(1), sin[pos].unsqueeze(1)
    for mask in (torch.empty(0, dtype=torch.bool), _tree(n, seed=3)):
        got = mod.rope_attention(
            qkv, cos, sin, fused.k[0], fused.v[0], start, start, mask, hd**-0.5
        )
        qk = apply_rope(qkv[:, : heads + kv], cos, sin)
        steps.write(0, qk[:, heads:], qkv[:, heads + kv :])
        want = mod.attention(qk[:, :heads], steps.k[0], steps.v[0], start, mask, hd**-0.5)
        assert torch.equal(got, want)
        assert torch.equal(fused.k, steps.k) and torch.equal(fused.v, steps.v)


def test_attention_isas_agree():
    """Both modules run each lane through the same operations: the same bits. (They put the
    committed keys in lanes from different pair counts: (128, 3, 50, 3) has AVX-512 do so and
    AVX2 not.)"""
    if len(RUNNABLE) < 2:
        pytest.skip("needs both modules runnable here")
    for hd, group, start, n in (
        (64, 3, 50, 8),
        (32, 2, 50, 8),
        (48, 1, 50, 8),
        (64, 3, 301, 17),
        (36, 2, 33, 18),
        (128, 3, 50, 3),
    ):
        for kv_dtype in (torch.float32, torch.float16):
            cache = _cache(hd, 2, group, start, n, seed=hd, kv_dtype=kv_dtype)
            q = torch.randn(n, 2 * group, hd, generator=torch.Generator().manual_seed(hd)) * 4
            for mask in (None, _tree(n, seed=1)):
                assert torch.equal(
                    _run(RUNNABLE["avx512"], q, cache, mask), _run(RUNNABLE["avx2"], q, cache, mask)
                )


# ------------------------------------------------------------------------------------- W8A8


def pack(qweight: torch.Tensor, scale: torch.Tensor, mod: ModuleType) -> tuple[torch.Tensor, ...]:
    """quant.py's packing for a compiled module (one layout for every ISA): (packed, comp, scale)."""
    lin = quant.Int8Linear(qweight, scale, None, kernels=Kernels(mod.ISA, mod))
    return lin.packed, lin.comp, lin.scale


def torch_linear(
    qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None, residual: bool
) -> quant.Int8Linear:
    """quant.py's torch path (int_dot)."""
    return quant.Int8Linear(qweight, scale, bias, kernels=TORCH, residual=residual)


def _weights(n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    qweight, scale = quant.quantize_weight(torch.randn(n, k, generator=g))
    return qweight, scale, torch.randn(n, generator=g)


def _x(m: int, k: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * 2
    x[:, 3] *= 20  # an outlier channel, as real activations have
    if m > 2:
        x[1] = 0  # an all-zero row: scale 0
    return x.to(dtype)


@pytest.mark.parametrize("isa,variant", per_variant())
@pytest.mark.parametrize("n,k", [(67, 45), (96, 64), (960, 576)])
def test_w8a8_bits_equal_torch_path(isa, variant, n, k):
    mod = RUNNABLE[isa]
    qweight, scale, bias = _weights(n, k, seed=n)
    packed, comp, sc = pack(qweight, scale, mod)
    for residual in (False, True):
        for b in (bias, None):
            ref = torch_linear(qweight, scale, b, residual)
            for dtype in (torch.float32, torch.bfloat16):
                for m in (1, 5, 16):
                    x = _x(m, k, seed=m, dtype=dtype)
                    got = mod.w8a8_linear(
                        x, packed, comp, sc, b, n, 2 if residual else 1, variant=variant
                    )
                    assert torch.equal(got, ref(x)), (
                        f"{dtype} M={m} residual={residual} bias={b is not None}"
                    )


@pytest.mark.parametrize("isa,variant", per_variant())
def test_w8a8_fused_norm_and_row_invariance(isa, variant):
    """With the RMSNorm fused the sum of squares runs in another order than torch's: close, not
    equal. A row's bits do not depend on the other rows or the thread count."""
    mod = RUNNABLE[isa]
    n, k = 200, 96
    qweight, scale, bias = _weights(n, k, seed=1)
    packed, comp, sc = pack(qweight, scale, mod)
    gamma = torch.rand(k, generator=torch.Generator().manual_seed(2)) + 0.5
    ref = torch_linear(qweight, scale, bias, True)
    x = _x(16, k, seed=3, dtype=torch.float32)
    # noqa: E731
    run = lambda x, norm: mod.w8a8_linear(
        x, packed, comp, sc, bias, n, 2, norm, 1e-5, variant=variant
    )
    torch.testing.assert_close(run(x, gamma), ref.norm_linear(x, gamma, 1e-5), rtol=1e-5, atol=1e-5)
    for norm in (None, gamma):
        with threads(2):
            full = run(x, norm)
        with threads(1):
            assert torch.equal(run(x, norm), full)
        for i in (0, 6, 15):
            assert torch.equal(run(x[i : i + 1], norm)[0], full[i])


def test_w8a8_variants_agree_bit_for_bit():
    """Every inner loop of every module, fused norm included (the avx2 module sums the squares
    in the AVX-512 lane order)."""
    runs = [(m, v) for m in RUNNABLE.values() for v in m.w8a8_variants()]
    if len(runs) < 2:
        pytest.skip("a single W8A8 inner loop runs here")
    qweight, scale, bias = _weights(131, 300, seed=4)
    packed, comp, sc = pack(qweight, scale, runs[0][0])
    gamma = torch.rand(300, generator=torch.Generator().manual_seed(5)) + 0.5
    for dtype in (torch.float32, torch.bfloat16):
        x = _x(37, 300, seed=6, dtype=dtype)  # 37 rows: several tiles of every height
        for norm in (None, gamma):
            outs = [
                m.w8a8_linear(x, packed, comp, sc, bias, 131, 2, norm, 1e-5, variant=v)
                for m, v in runs
            ]
            assert all(torch.equal(o, outs[0]) for o in outs[1:]), (dtype, norm is not None)


@pytest.mark.parametrize("isa", per_isa())
def test_module_api(isa):
    mod = RUNNABLE[isa]
    assert mod.ISA == isa and mod.VERSION == VERSION and mod.cpu_supported() is True
    variants = mod.w8a8_variants()
    assert (
        variants
        and set(variants) <= {"amx", "vnni512", "avxvnni", "avx2"}
        and (isa == "avx2") == ("avx2" in variants)
    )
    # AMX tiles (the GGUF loop's extra variant) only in the AVX-512 module and where CPUID has them
    assert "amx" not in variants or (isa == "avx512" and "amx_tile" in cpu_features())
    qweight, scale, _ = _weights(40, 16, seed=0)
    packed, comp, sc = pack(qweight, scale, mod)
    with pytest.raises(RuntimeError, match="variant"):
        mod.w8a8_linear(torch.ones(1, 16), packed, comp, sc, None, 40, 2, variant="no-such-loop")
    with pytest.raises(RuntimeError, match="packed"):
        mod.w8a8_linear(torch.ones(1, 20), packed, comp, sc, None, 40, 2)


# ------------------------------------------------------------------------- fp32 / bf16 linear

# (N, K): N % 6 and K % 16 varied; K > 768 is walked in segments when rows share a weight block
LINEAR_SHAPES = [(67, 45), (96, 64), (13, 16), (50, 7), (960, 576), (131, 300), (37, 1000)]


def _linear_inputs(n: int, k: int, m: int, dtype: torch.dtype, seed: int):
    """x [m, k] fp32 (an outlier channel, a zero row), w [n, k] in dtype, bias [n], norm weight [k]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    x[:, k // 2] *= 30
    if m > 2:
        x[1] = 0
    w = (torch.randn(n, k, generator=g) * 0.1).to(dtype)
    return x, w, torch.randn(n, generator=g), torch.rand(k, generator=g) + 0.5


def _linear_reference(x, w, bias, norm, eps):
    """float64 y = x' @ w.T + b with x' = x * rsqrt(mean(x^2) + eps) * g; and a bound on an fp32
    evaluation's error: K/16 + 4 roundings in a chain of partial sums (16-lane FMA accumulation
    then the horizontal sum), a few more for the norm, each at most 2^-24 of |x'| @ |w|.T."""
    x64, w64 = x.double(), w.double()
    if norm is not None:
        x64 = x64 * torch.rsqrt((x64 * x64).mean(1, keepdim=True) + eps) * norm.double()
    y = x64 @ w64.T
    bound = (x.shape[1] / 16 + 12) * 2.0**-24 * (x64.abs() @ w64.abs().T)
    if bias is not None:
        y = y + bias.double()
        bound = bound + 2.0**-24 * bias.double().abs()
    return y, bound


@pytest.mark.parametrize("isa", per_isa())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n,k", LINEAR_SHAPES)
def test_linear_matches_float64_reference(isa, dtype, n, k):
    mod = RUNNABLE[isa]
    for m in (1, 5, 16):
        x, w, bias, norm = _linear_inputs(n, k, m, dtype, seed=n * k + m)
        for b in (bias, None):
            for g in (norm, None):
                got = mod.linear(x, w, b, g, 1e-5)
                assert got.dtype == torch.float32 and got.shape == (m, n)
                want, bound = _linear_reference(x, w, b, g, 1e-5)
                err = (got.double() - want).abs()
                assert (err <= bound).all(), (
                    f"M={m} bias={b is not None} norm={g is not None}: "
                    f"max error {err.max():.3g}, bound there {bound.flatten()[err.argmax()]:.3g}"
                )


@pytest.mark.parametrize("isa", per_isa())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("n,k", [(67, 45), (96, 64), (960, 576), (37, 1000)])
def test_linear_row_invariance(isa, dtype, n, k):
    """A row's bits do not depend on the other rows, its place among them (other row tiles),
    the thread count, or whether x is a view with a longer row stride."""
    mod = RUNNABLE[isa]
    x, w, bias, norm = _linear_inputs(n, k, 37, dtype, seed=k)
    perm = torch.randperm(37, generator=torch.Generator().manual_seed(n))
    for b, g in ((bias, norm), (None, None), (bias, None)):
        run = lambda x: mod.linear(x, w, b, g, 1e-6)  # noqa: E731
        with threads(2):
            full = run(x)
        with threads(1):
            assert torch.equal(run(x), full), "1 thread vs 2"
        assert torch.equal(run(x[perm])[perm.argsort()], full), "rows at other places among 37"
        for i in (0, 1, 6, 15, 36):
            assert torch.equal(run(x[i : i + 1])[0], full[i]), f"row {i} alone"
            others = [j for j in perm.tolist() if j != i][:15]
            place = (3 * i + 5) % 16
            among = x[others[:place] + [i] + others[place:]]
            assert torch.equal(run(among)[place], full[i]), f"row {i} at place {place} of 16"
        wide = torch.zeros(37, k + 5)
        wide[:, 2 : k + 2] = x
        assert torch.equal(run(wide[:, 2 : k + 2]), full), "a strided view of x"


def test_linear_isas_agree():
    """Both modules run each lane through the same operations: the same bits (fp32 and bf16
    weights, bias, fused norm, every row tile and the narrow channel blocks)."""
    if len(RUNNABLE) < 2:
        pytest.skip("needs both modules runnable here")
    for n, k in ((67, 45), (131, 300), (960, 576), (50, 7), (37, 1000)):
        for dtype in (torch.float32, torch.bfloat16):
            x, w, bias, norm = _linear_inputs(n, k, 37, dtype, seed=n)
            for b, g in ((bias, norm), (None, None)):
                for m in (1, 3, 16, 37):
                    a = RUNNABLE["avx512"].linear(x[:m], w, b, g, 1e-5)
                    assert torch.equal(a, RUNNABLE["avx2"].linear(x[:m], w, b, g, 1e-5)), (
                        n,
                        k,
                        dtype,
                        m,
                    )


@pytest.mark.parametrize("isa", per_isa())
def test_linear_api(isa):
    mod = RUNNABLE[isa]
    x, w = torch.ones(3, 16), torch.ones(5, 16)
    assert mod.linear(x[:0], w).shape == (0, 5)
    for bad, match in (
        ((x.double(), w), "x must be"),
        ((x.t(), torch.ones(5, 3)), "x must be"),
        ((x, w.half()), "w must be"),
        ((x, torch.ones(16, 5).t()), "w must be"),
        ((x, torch.ones(5, 15)), "features"),
        ((x, w, torch.ones(4)), "bias"),
        ((x, w, None, torch.ones(15)), "norm"),
    ):
        with pytest.raises(RuntimeError, match=match):
            mod.linear(*bad)


# ----------------------------------------------------------------------------- import safety


def test_only_kernels_use_vector_extensions():
    """Static check of how import safety is built: in each module, every function containing an
    AVX/AVX-512 instruction (VEX/EVEX: v-prefixed, ymm/zmm/mask registers) is a kernel in
    namespace isa, compiled inside the target region; init, pybind11 and torch code are plain."""
    if not shutil.which("objdump"):
        pytest.skip("objdump is not installed")
    mods = [importlib.util.find_spec(f"paraspec.model._kernels_{isa}") for isa in ISAS]
    paths = [s.origin for s in mods if s is not None]
    if not paths:
        pytest.skip("no kernel module is built")
    for path in paths:
        asm = subprocess.run(
            ["objdump", "-d", "-C", "--no-show-raw-insn", path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        func, vector_funcs = "", set()
        for line in asm.splitlines():
            if m := re.match(r"^[0-9a-f]+ <(.*)>:$", line):
                func = m.group(1)
            elif "\t" in line and re.search(
                r"\t(v[a-z0-9]+|\{vex\} v[a-z0-9]+)\s|%[yz]mm|%k[0-7]\b", line
            ):
                vector_funcs.add(func)
        outside = sorted(f for f in vector_funcs if not re.match(r"^([\w:<>, ]+ )?isa::", f))
        assert not outside, f"{os.path.basename(path)}: AVX code outside the kernels: {outside[:5]}"
        assert any("isa::" in f for f in vector_funcs), "the kernels should use vector instructions"


QEMU_CHILD = r"""
import json, sys, torch
torch.set_num_threads(1)
out = {}
import paraspec.model._kernels_avx512 as a
out["avx512_supported"] = a.cpu_supported()
out["avx512_variants"] = a.w8a8_variants()
inp = torch.load(sys.argv[1])
try:
    a.attention(*inp["attention"])
    out["avx512_refused"] = ""
except RuntimeError as e:
    out["avx512_refused"] = str(e).splitlines()[0]
import paraspec.model._kernels_avx2 as b
out["avx2_supported"] = b.cpu_supported()
out["avx2_variants"] = b.w8a8_variants()
out["capability"] = torch.backends.cpu.get_cpu_capability()
res = {"attention": b.attention(*inp["attention"]), "w8a8": b.w8a8_linear(*inp["w8a8"], variant="avx2"),
       "linear": b.linear(*inp["linear"]), "linear_fp32": b.linear(*inp["linear_fp32"])}
for kind, args in inp["gguf"].items():
    res["gguf " + kind] = b.gguf_linear(*args, variant="avx2")
torch.save(res, sys.argv[2])
print(json.dumps(out))
"""


def test_avx2_cpu_under_qemu(tmp_path):
    """On an emulated AMD Zen 2 (AVX2 + FMA, no AVX-512, no AVX-VNNI): both modules import, the
    AVX-512 one refuses cleanly (no SIGILL), the AVX2 one gives this machine's bits (attention,
    W8A8, the bf16 linear with bias and fused norm, the fp32 one, GGUF Q5_0 / Q4_K / Q6_K), which
    are the AVX-512 bits."""
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.skip("qemu-x86_64 is not installed (apt-get install qemu-user)")
    if "avx2" not in RUNNABLE or importlib.util.find_spec("paraspec.model._kernels_avx512") is None:
        pytest.skip("needs both modules built and the avx2 one runnable here")
    cache = _cache(64, 1, 3, 20, 4, seed=9)
    q = torch.randn(4, 3, 64, generator=torch.Generator().manual_seed(9))
    att = (q, cache.k[0], cache.v[0], 20, _tree(4, seed=2), 0.125)
    qweight, scale, bias = _weights(40, 24, seed=9)
    packed, comp, sc = pack(qweight, scale, RUNNABLE["avx2"])
    lin = (_x(3, 24, seed=9, dtype=torch.float32), packed, comp, sc, bias, 40, 2)
    x, w, b, g = _linear_inputs(67, 45, 5, torch.bfloat16, seed=9)
    dense = (x, w, b, g, 1e-5)
    dense32 = (x, w.float(), None, None, 0.0)
    gguf = {}  # the GGUF formats whose unpacking differs (K-quants, Q5_0's bit plane), 2 passes
    for kind, scales in (("Q5_0", [0]), ("Q4_K", [0, 2]), ("Q6_K", [208])):
        values, nbytes = ggml.BLOCK_SIZE[kind]
        raw = np.random.default_rng(len(scales)).integers(
            0, 256, (40, 256 // values, nbytes), dtype=np.uint8
        )
        for at in scales:  # random bytes, finite fp16 scales
            raw[..., at : at + 2] = np.float16(0.01).reshape(1).view(np.uint8)
        wq = ggml.GGUFWeight(kind, raw.reshape(40, -1))
        gguf[kind] = (
            _x(3, 256, seed=9, dtype=torch.float32),
            ggml.pack(wq),
            ggml.FORMATS[kind],
            40,
            2,
            bias,
            None,
            0.0,
        )
    torch.save(
        {"attention": att, "w8a8": lin, "linear": dense, "linear_fp32": dense32, "gguf": gguf},
        tmp_path / "in.pt",
    )
    script = tmp_path / "child.py"
    script.write_text(QEMU_CHILD)
    proc = subprocess.run(
        [
            qemu,
            "-cpu",
            "EPYC-Rome",
            sys.executable,
            str(script),
            str(tmp_path / "in.pt"),
            str(tmp_path / "out.pt"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, f"rc {proc.returncode} (-4 / 132: SIGILL): {proc.stderr[-2000:]}"
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["capability"] == "AVX2", info
    assert (
        info["avx512_supported"] is False
        and info["avx512_variants"] == []
        and "lacks" in info["avx512_refused"]
    )
    assert info["avx2_supported"] is True and info["avx2_variants"] == ["avx2"]
    got = torch.load(tmp_path / "out.pt")
    mod = RUNNABLE["avx2"]
    with threads(1):
        assert torch.equal(got["attention"], mod.attention(*att))
        assert torch.equal(got["w8a8"], mod.w8a8_linear(*lin, variant="avx2"))
        for kind, args in gguf.items():
            assert torch.equal(got["gguf " + kind], mod.gguf_linear(*args, variant="avx2")), kind
        for name, args in (("linear", dense), ("linear_fp32", dense32)):
            assert torch.equal(got[name], mod.linear(*args)), name
            if "avx512" in RUNNABLE:
                assert torch.equal(got[name], RUNNABLE["avx512"].linear(*args)), name
