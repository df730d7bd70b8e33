"""Which matmul paths give a row the same bits whatever the number of rows in the call: the
property parallel decoding's exactness rests on, measured on this CPU and torch build.

    python benchmarks/row_invariance.py
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \\
        python benchmarks/row_invariance.py          # torch as on an AVX2-only CPU

For SmolLM2-135M's linear shapes and a few small ones, fp32 and bf16 weights: the rows of an
M-row call are compared with the same rows in a 4-row call (M = 1..64) and with each row
computed alone (padded to 4 rows, as the forward pads). Paths: torch F.linear (MKL for fp32),
oneDNN's prepacked matmul (what transformer.Linear uses where it exists), and paraspec's own
csrc linear for every ISA module this CPU runs (row-invariant by construction). Then the GGUF
block linears (quantization "gguf": Q4_1, Q8_0, Q4_K, Q6_K, two activation passes) on every kernel
variant this CPU runs (avx512:amx switches to AMX tiles at 16 sub-rows, Q8_0 at 20, so its M = 8+
calls take another loop than M < 8: they must still agree bit for bit).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536), (49152, 576), (256, 128), (128, 256), (96, 32)]
ROWS = (1, 2, 3, 5, 8, 12, 16, 24, 32, 64)


def paths(w: torch.Tensor) -> dict:
    out = {"F.linear": lambda x: F.linear(x.to(w.dtype), w)}
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
        out["oneDNN packed"] = lambda x: torch.ops.mkldnn._linear_pointwise(x.to(w.dtype), packed, None, "none", [], "")
    except (RuntimeError, AttributeError) as e:
        out["oneDNN packed"] = str(e).split("\n")[0][:60]
    from paraspec.model import kernels
    for k in kernels.runnable():
        if k.module is not None and hasattr(k.module, "linear") and k.name not in out:
            out[f"paraspec {k.name}"] = lambda x, m=k.module: m.linear(x.float().contiguous(), w)
    return out


def main() -> None:
    from paraspec.info import cpu_report
    r = cpu_report()
    print(f"{r['cpu']}; features {' '.join(r['features'])}; ATen {r['torch_cpu_capability']}; "
          f"torch {r['torch']}, {r['torch_threads']} threads")
    torch.manual_seed(0)
    print(f"{'dtype':9} {'N x K':12} {'path':18} {'M whose first rows differ from M=4':36} rows of 16 differing alone")
    for dtype in (torch.float32, torch.bfloat16):
        for n, k in SHAPES:
            w = (torch.randn(n, k) * 0.05).to(dtype)
            x = torch.randn(64, k)
            for name, fn in paths(w).items():
                if isinstance(fn, str):
                    print(f"{str(dtype)[6:]:9} {f'{n}x{k}':12} {name:18} n/a: {fn}")
                    continue
                ref = fn(x[:4])
                bad = [m for m in ROWS if not torch.equal(fn(x[:m])[:min(m, 4)], ref[:min(m, 4)])]
                y16 = fn(x[:16])
                alone = [i for i in range(16) if not torch.equal(fn(x[i:i + 1].expand(4, -1).contiguous())[0], y16[i])]
                print(f"{str(dtype)[6:]:9} {f'{n}x{k}':12} {name:18} {str(bad) if bad else 'none':36} "
                      f"{alone if alone else 'none'}")
    gguf_rows()


def gguf_rows() -> None:
    """The same table for the GGUF linears, per format and kernel variant."""
    import gguf
    import numpy as np

    from paraspec.model import ggml, kernels
    from paraspec.model.ggml_kquants import quantize_q4_k, quantize_q6_k
    quant = {"Q4_1": lambda w: gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_1),
             "Q8_0": lambda w: gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0),
             "Q4_K": quantize_q4_k, "Q6_K": quantize_q6_k}
    print(f"{'format':9} {'N x K':12} {'path':18} {'M whose first rows differ from M=4':36} rows of 16 differing alone")
    for kind, fn in quant.items():
        shapes = [(960, 576), (3072, 576), (576, 1536)] if kind[-1] != "K" else [(960, 768), (3072, 768), (768, 1536)]
        for n, k in shapes:                              # K-quants: K a multiple of 256
            w = ggml.GGUFWeight(kind, fn((np.random.default_rng(0).standard_normal((n, k)) * 0.05).astype(np.float32)))
            x = torch.randn(64, k)
            for kern in kernels.runnable():
                if kern.module is None:
                    continue
                lin = ggml.GGUFLinear(w, kernels=kern)
                ref = lin(x[:4])
                bad = [m for m in ROWS if not torch.equal(lin(x[:m])[:min(m, 4)], ref[:min(m, 4)])]
                y16 = lin(x[:16])
                alone = [i for i in range(16) if not torch.equal(lin(x[i:i + 1])[0], y16[i])]
                print(f"{kind:9} {f'{n}x{k}':12} {kern.label:18} {str(bad) if bad else 'none':36} "
                      f"{alone if alone else 'none'}")


if __name__ == "__main__":
    main()
