// The CPU kernels for one instruction set, as one extension module: decode/verify attention
// (attention.h), the W8A8 linear (w8a8.h, w8a8_loop.h) and the fp32/bf16 linear (linear.h). csrc/build.py compiles this file
// twice, with -DPARASPEC_AVX512 into paraspec.model._kernels_avx512 and with -DPARASPEC_AVX2
// into paraspec.model._kernels_avx2, both with baseline x86-64 flags.
//
// Import safety: only the code between push_options and pop_options below is compiled for the
// module's instructions (isa_*.h's `#pragma GCC target`); the module init, pybind11, torch's
// header code and the argument checks here are plain x86-64, so importing either module never
// executes an instruction the CPU may lack. Every header is included before the region, so no
// inline function of theirs is compiled for the target and shared with baseline callers. Each
// entry point checks cpu_supported() (CPUID) before it calls into the region, and refuses with
// an error where the CPU lacks a feature.

// only the torch headers used (torch/extension.h would double the compile time)
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/silu.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/utils/pybind.h>  // pybind11 and its at::Tensor type caster
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

// What every copy of w8a8_loop.h provides: its tile height, how it stores activations
// (q + offset) and the inner loop for 1..8 sub-rows.
using AccFn = void (*)(const int32_t*, int64_t, const int8_t*, int64_t, int64_t, int32_t*, bool);
struct W8A8Loop {
  int rows;
  int offset;
  AccFn fn[9];
};
#include "gguf_layout.h"
// What every copy of gguf_loop.h provides: its tile height and, per format (gguf.h's
// GgufFormat: Q4_0, Q4_1, Q8_0, Q5_0, Q4_K, Q6_K), the loop over a panel's blocks for 1..8 rows.
using GgufFn = void (*)(const uint8_t*, int64_t, int64_t, const int32_t*, int64_t, const float*, const int32_t*,
                        const int32_t*, const float*, int64_t, float*, const uint8_t*, int64_t);
// A variant's loop for calls of several sub-rows (AMX tiles: gguf_amx.h; AVX2's wide tiles:
// gguf_wide.h): per format (nullptr: none) all sub-rows of a row block over one panel; begin()
// and end() (where not nullptr) set up and release per-thread state (AMX's tile state).
using GgufWideFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, const float*, const int32_t*,
                            const int32_t*, const float*, int64_t, float*);
struct GgufWide {
  int64_t min_rows[kGgufFormats];  // per format, sub-rows from which a row block runs on it (fewer: the kRows tiles)
  void (*begin)();
  void (*end)();
  GgufWideFn fn[2][kGgufFormats];  // per pass count P - 1
};
struct GgufLoop {
  int rows[2][kGgufFormats];  // sub-rows per register tile, per pass count P - 1 and format
  GgufFn fn[2][kGgufFormats][9];  // per pass count P - 1 (P = 2: even sub-row counts only)
  const GgufWide* wide = nullptr;  // calls of wide->min_rows[format] sub-rows or more
};
constexpr int64_t kPrefetch = 8192;  // bytes ahead in the weight stream

#pragma GCC push_options
#if defined(PARASPEC_AVX512)
#include "isa_avx512.h"
#elif defined(PARASPEC_AVX2)
#include "isa_avx2.h"
#else
#error "compile with -DPARASPEC_AVX512 or -DPARASPEC_AVX2 (csrc/build.py does)"
#endif
#include "vec.h"
#include "attention.h"
#include "w8a8.h"
#include "gguf.h"
#include "gguf_dequant.h"
#include "linear.h"
#pragma GCC pop_options
#if defined(PARASPEC_AVX512) && defined(__linux__)
#define PARASPEC_AMX 1
#include "gguf_amx.h"  // its own target region (AMX), after the module's
#endif

// ---- plain x86-64 from here on ----
namespace {

#ifdef PARASPEC_AMX
// CPUID has AMX-TILE and AMX-INT8, and Linux lets this process use the tile data state (it
// must be asked for once, ARCH_REQ_XCOMP_PERM, before the first tile instruction).
bool amx_usable() {
  static const bool ok = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25))) return false;
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
  }();
  return ok;
}
// vnni512's loops, and AMX tiles for calls with many sub-rows
const GgufLoop kAmxLoop = [] {
  GgufLoop l = isa::vnni512::kGgufLoop;
  l.wide = &isa::amx::kGgufAmx;
  return l;
}();
#endif

bool cpu_supported() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return PARASPEC_CPU_SUPPORTED();
  }();
  return ok;
}

void require_cpu() {
  TORCH_CHECK(cpu_supported(), "paraspec: this CPU lacks instructions _kernels_" PARASPEC_ISA
              " was compiled for (see its cpu_supported())");
}

struct Variant {
  const char* name;
  const W8A8Loop* loop;
  const GgufLoop* gguf;
};

// The W8A8 inner loops this CPU can run, best first.
std::vector<Variant> variants() {
  if (!cpu_supported()) return {};
#if defined(PARASPEC_AVX512)
  std::vector<Variant> v;
#ifdef PARASPEC_AMX
  if (amx_usable()) v.push_back({"amx", &isa::vnni512::kLoop, &kAmxLoop});
#endif
  v.push_back({"vnni512", &isa::vnni512::kLoop, &isa::vnni512::kGgufLoop});
  return v;
#else
  std::vector<Variant> v;
#ifdef PARASPEC_AVXVNNI
  if (__builtin_cpu_supports("avxvnni")) v.push_back({"avxvnni", &isa::avxvnni::kLoop, &isa::avxvnni::kGgufWideLoop});
#endif
  v.push_back({"avx2", &isa::avx2::kLoop, &isa::avx2::kGgufWideLoop});
  return v;
#endif
}

// The variant called `name` ("" for the best); an error naming `op` where this CPU runs none.
const Variant& variant_named(const std::string& name, const char* op) {
  static const std::vector<Variant> runnable = variants();  // CPUID and the OS do not change
  for (const Variant& v : runnable)
    if (name.empty() || name == v.name) return v;
  TORCH_CHECK(false, op, ": variant '", name, "' is not one this CPU runs");
}

std::vector<std::string> variant_names() {
  std::vector<std::string> names;
  for (const Variant& v : variants()) names.emplace_back(v.name);
  return names;
}

// q [n_q, n_heads, hd] fp32, heads contiguous (rows may be strided: a slice of qkv); k and v
// [n_kv, cap, hd] fp32 or both fp16 (one layer; fp16 is widened to fp32 as it is read). Every row sees the
// keys [0, start); visible [n_q, m] bool (m >= n_q) says which of the slots [start, start + m)
// row i sees: the new rows' keys are the last n_q of them (m == n_q: the usual draft tree over
// the committed cache; m > n_q: committed slots under a mask too, as ASPD's sibling branches).
// An empty tensor is a causal chain of new rows at [start, start + n_q). order [m] int64, if given:
// a row takes its masked slots by ascending order[j] (ties by slot) instead of by slot: ASPD's
// flattened order, where a block's slots are interleaved by step (the sum's order is part of its
// bits). Returns [n_q, n_heads * hd] fp32.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t start,
                     at::Tensor visible, double scale, const c10::optional<at::Tensor>& order) {
  require_cpu();
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && q.stride(2) == 1 && q.stride(1) == q.size(2),
              "q: [n_q, heads, hd] fp32 with contiguous heads");
  const bool half_kv = k.scalar_type() == at::kHalf;
  TORCH_CHECK(k.dim() == 3 && (half_kv || k.scalar_type() == at::kFloat) && k.is_contiguous(),
              "k: [kv, cap, hd] fp32 or fp16");
  TORCH_CHECK(v.dim() == 3 && v.scalar_type() == k.scalar_type() && v.is_contiguous(), "v: [kv, cap, hd], k's dtype");
  const int64_t n_q = q.size(0), n_heads = q.size(1), hd = q.size(2), q_ld = q.stride(0);
  const int64_t n_kv = k.size(0), cap = k.size(1);
  TORCH_CHECK(k.size(2) == hd && v.size(2) == hd && v.size(1) == cap && v.size(0) == n_kv && n_kv > 0 &&
              n_heads % n_kv == 0, "shapes");
  const bool causal = visible.numel() == 0;
  const int64_t m = causal ? n_q : visible.size(1);
  if (!causal) {
    TORCH_CHECK(visible.scalar_type() == at::kBool && visible.dim() == 2 && visible.size(0) == n_q &&
                visible.size(1) >= n_q, "visible: [n_q, m >= n_q] bool");
    visible = visible.contiguous();
  }
  TORCH_CHECK(start >= 0 && start + m <= cap, "the new rows must fit in the cache");
  const int64_t group = n_heads / n_kv;
  // per row: the masked slots it sees, in slot order (every row sees [0, start))
  std::vector<std::vector<int64_t>> extra(n_q);
  const bool* vis = causal ? nullptr : visible.data_ptr<bool>();
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t j = 0; j < m; ++j)
      if (causal ? j <= i : vis[i * m + j]) extra[i].push_back(start + j);
  if (order && order->numel()) {
    TORCH_CHECK(order->scalar_type() == at::kLong && order->numel() == m, "order: [m] int64");
    const at::Tensor o = order->contiguous();
    const int64_t* rank = o.data_ptr<int64_t>();
    const auto before = [&](int64_t a, int64_t b) { return rank[a - start] < rank[b - start]; };
    for (auto& e : extra)
      if (!std::is_sorted(e.begin(), e.end(), before)) std::stable_sort(e.begin(), e.end(), before);
  }

  auto out = at::empty({n_q, n_heads * hd}, q.options());
  const float* qp = q.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  // Work items: (row block, kv head). A block walks the committed keys once for all its rows,
  // so fewer, larger blocks move fewer bytes (one row at 1000 keys reads 2.3 MB a layer); the
  // block count is the smallest that gives the threads the least rows each (items go to
  // threads in equal contiguous runs). Only the speed depends on the blocking, never the bits.
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  int64_t blocks = 1, best = INT64_MAX;
  for (int64_t b = 1; b <= n_q; ++b) {
    const int64_t span = (b * n_kv + threads - 1) / threads * ((n_q + b - 1) / b);  // rows x kv heads a thread does
    if (span < best) best = span, blocks = b;
  }
  const int64_t rows = (n_q + blocks - 1) / blocks;   // per block
  blocks = (n_q + rows - 1) / rows;
  const int64_t ld = start + m + 16;                  // scratch per (row, head): its scores
  const auto run = [&](const auto* kp, const auto* vp) {
    at::parallel_for(0, blocks * n_kv, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> s(rows * group * ld);
      std::vector<float> sum(rows * group * (hd + 1));
      std::vector<isa::Keys> keys(rows);
      for (int64_t w = begin; w < end; ++w) {
        const int64_t i0 = w / n_kv * rows, kv = w % n_kv, nr = std::min(rows, n_q - i0);
        for (int64_t r = 0; r < nr; ++r)
          keys[r] = {start, extra[i0 + r].data(), static_cast<int64_t>(extra[i0 + r].size())};
        const int64_t h0 = kv * group;
        isa::attend_block(qp + i0 * q_ld + h0 * hd, q_ld, nr, group, kp + kv * cap * hd,
                          vp + kv * cap * hd, hd, keys.data(), sc, s.data(), ld, sum.data(),
                          op + (i0 * n_heads + h0) * hd, n_heads * hd);
      }
    });
  };
  if (half_kv)
    run(reinterpret_cast<const isa::Half*>(k.data_ptr<at::Half>()),
        reinterpret_cast<const isa::Half*>(v.data_ptr<at::Half>()));
  else
    run(k.data_ptr<float>(), v.data_ptr<float>());
  return out;
}

// One decode/verify layer's attention from its fused projections, in one call per sequence:
// qkv [n_q, n_heads + 2 * n_kv, hd] fp32 (heads contiguous), rotary tables cos, sin [n_q, hd]
// (rotate-half layout); rotates q and k (x * cos + rotate_half(x) * sin, each product and the
// sum rounded as the torch path's apply_rope rounds them), writes k and v to the cache slots
// [length, length + n_q), then attention(q, k, v, start, visible, scale, order).
at::Tensor rope_attention(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k,
                          const at::Tensor& v, int64_t length, int64_t start, at::Tensor visible, double scale,
                          const c10::optional<at::Tensor>& order) {
  require_cpu();
  TORCH_CHECK(qkv.dim() == 3 && qkv.scalar_type() == at::kFloat && qkv.stride(2) == 1 &&
              qkv.stride(1) == qkv.size(2), "qkv: [n_q, heads + 2 kv heads, hd] fp32 with contiguous heads");
  TORCH_CHECK(k.dim() == 3 && (k.scalar_type() == at::kFloat || k.scalar_type() == at::kHalf) && k.is_contiguous() &&
              v.is_contiguous() && v.sizes() == k.sizes() && v.scalar_type() == k.scalar_type(),
              "k, v: [kv, cap, hd] fp32 or fp16");
  const int64_t n_q = qkv.size(0), hd = qkv.size(2), n_kv = k.size(0), n_heads = qkv.size(1) - 2 * n_kv;
  TORCH_CHECK(n_heads > 0 && k.size(2) == hd && hd % 2 == 0, "shapes");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.is_contiguous() &&
              sin.is_contiguous() && cos.numel() == n_q * hd && sin.numel() == n_q * hd, "cos, sin: [n_q, hd] fp32");
  TORCH_CHECK(length >= 0 && length + n_q <= k.size(1), "the new rows must fit in the cache");
  auto q = at::empty({n_q, n_heads, hd}, qkv.options());
  const int64_t cap = k.size(1), half = hd / 2;
  const float* x = qkv.data_ptr<float>();
  const float* c = cos.data_ptr<float>();
  const float* sn = sin.data_ptr<float>();
  float* qp = q.data_ptr<float>();
  std::vector<float> kr(hd);  // a rotated K row, before it is stored in the cache's dtype
  const auto write = [&](auto* kp, auto* vp) {
    for (int64_t i = 0; i < n_q; ++i) {
      const float* row = x + i * qkv.stride(0);
      const float* ci = c + i * hd;
      const float* si = sn + i * hd;
      for (int64_t h = 0; h < n_heads + n_kv; ++h) {  // q heads, then k heads
        const float* a = row + h * hd;
        float* o = h < n_heads ? qp + (i * n_heads + h) * hd : kr.data();
        for (int64_t d = 0; d < half; ++d) o[d] = a[d] * ci[d] + (-a[d + half]) * si[d];
        for (int64_t d = half; d < hd; ++d) o[d] = a[d] * ci[d] + a[d - half] * si[d];
        if (h >= n_heads) isa::kv_store(o, kp + ((h - n_heads) * cap + length + i) * hd, hd);
      }
      for (int64_t h = 0; h < n_kv; ++h)
        isa::kv_store(row + (n_heads + n_kv + h) * hd, vp + (h * cap + length + i) * hd, hd);
    }
  };
  if (k.scalar_type() == at::kHalf)
    write(reinterpret_cast<isa::Half*>(k.data_ptr<at::Half>()), reinterpret_cast<isa::Half*>(v.data_ptr<at::Half>()));
  else
    write(k.data_ptr<float>(), v.data_ptr<float>());
  return attention(q, k, v, start, std::move(visible), scale, order);
}

// x [M, K] fp32 or bf16 (rows contiguous); packed [Np/32 * Kp/4 * 128] int8; comp [Np] int32
// (128 * row sums of the weights, for the VNNI variants); w_scale [Np] fp32; bias [N] fp32 or
// None; passes 1 (x in int8) or 2 (plus its int8 residual); norm: RMSNorm weight [K] fp32 to
// apply to x first (with eps), or None; variant: a w8a8_variants() name, "" for the best.
// Returns fp32 [M, N].
at::Tensor w8a8_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& comp,
                       const at::Tensor& w_scale, const c10::optional<at::Tensor>& bias, int64_t N,
                       int64_t passes, const c10::optional<at::Tensor>& norm, double eps,
                       const std::string& variant) {
  require_cpu();
  const W8A8Loop* loop = variant_named(variant, "w8a8_linear").loop;
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, "x must be 2-D with contiguous rows");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, "x: fp32/bf16");
  TORCH_CHECK(passes == 1 || passes == 2, "passes must be 1 or 2");
  const int P = static_cast<int>(passes);
  const int64_t M = x.size(0), K = x.size(1), Kp = (K + 3) / 4 * 4;
  const int64_t panels = (N + 31) / 32;
  TORCH_CHECK(packed.scalar_type() == at::kChar && packed.is_contiguous() && packed.numel() == panels * 32 * Kp,
              "packed weight does not match x / N");
  TORCH_CHECK(comp.scalar_type() == at::kInt && comp.is_contiguous() && comp.numel() >= panels * 32,
              "comp: int32 [Np]");
  TORCH_CHECK(w_scale.scalar_type() == at::kFloat && w_scale.is_contiguous() && w_scale.numel() >= panels * 32,
              "w_scale: fp32 [Np]");
  TORCH_CHECK(!bias.has_value() || (bias->scalar_type() == at::kFloat && bias->is_contiguous() &&
                                    bias->numel() == N), "bias: fp32 [N]");
  TORCH_CHECK(!norm.has_value() || (norm->scalar_type() == at::kFloat && norm->is_contiguous() &&
                                    norm->numel() == K), "norm: fp32 [K]");
  at::Tensor y = at::empty({M, N}, x.options().dtype(at::kFloat));
  if (M == 0) return y;

  const int64_t rows = M * P;  // sub-rows
  at::Tensor xq = at::empty({rows * Kp}, x.options().dtype(at::kByte));
  at::Tensor sx = at::empty({rows}, x.options().dtype(at::kFloat));
  uint8_t* xqp = xq.data_ptr<uint8_t>();
  float* sxp = sx.data_ptr<float>();
  const float* g = norm.has_value() ? norm->data_ptr<float>() : nullptr;
  const int64_t ldx = x.stride(0);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const void* xp = x.data_ptr();
  // Rows quantise independently; in parallel only when there are enough of them (prefill) to
  // pay for a second fork (~0.2 us a row here, ~2 us a fork).
  at::parallel_for(0, M, M >= 32 ? 8 : M + 1, [&](int64_t m0, int64_t m1) {
    std::vector<float> v(K);
    const float e = static_cast<float>(eps);
    if (bf16)
      isa::quantize_rows(static_cast<const uint16_t*>(xp) + m0 * ldx, ldx, m1 - m0, K, Kp, P, g, e,
                         loop->offset, v.data(), xqp + m0 * P * Kp, sxp + m0 * P);
    else
      isa::quantize_rows(static_cast<const float*>(xp) + m0 * ldx, ldx, m1 - m0, K, Kp, P, g, e,
                         loop->offset, v.data(), xqp + m0 * P * Kp, sxp + m0 * P);
  });
  const int8_t* wp = packed.data_ptr<int8_t>();
  const int32_t* cp = comp.data_ptr<int32_t>();
  const float* swp = w_scale.data_ptr<float>();
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // Output channels split across threads (contiguous weight ranges).
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    std::vector<int32_t> acc(32 * std::min(rows, isa::kRowBlock));
    isa::panels(*loop, p0, p1, xqp, sxp, rows, P, Kp, wp, cp, swp, bp, yp, N, acc.data());
  });
  return y;
}

// x [M, K] fp32 or bf16 (rows contiguous, K a multiple of 32); packed: ggml.py's panel layout
// of format fmt (0 Q4_0, 1 Q4_1, 2 Q8_0, 3 Q5_0, 4 Q4_K, 5 Q6_K) for N output channels; passes 1 (x in int8 blocks) or
// 2 (plus their int8 residual); bias fp32 [N] or None; norm:
// RMSNorm weight fp32 [K] to apply to x first (with eps), or None; variant: a w8a8_variants()
// name (the GGUF loop of the same instructions), "" for the best. Returns fp32 [M, N].
at::Tensor gguf_linear(const at::Tensor& x, const at::Tensor& packed, int64_t fmt, int64_t N, int64_t passes,
                       const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& norm, double eps,
                       const std::string& variant) {
  require_cpu();
  const GgufLoop* loop = variant_named(variant, "gguf_linear").gguf;
  TORCH_CHECK(fmt >= 0 && fmt < kGgufFormats, "gguf_linear: fmt must be 0-5 (Q4_0, Q4_1, Q8_0, Q5_0, Q4_K, Q6_K)");
  TORCH_CHECK(passes == 1 || passes == 2, "gguf_linear: passes must be 1 or 2");
  const int P = static_cast<int>(passes);
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, "x must be 2-D with contiguous rows");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, "x: fp32/bf16");
  const int64_t M = x.size(0), K = x.size(1), B = K / 32, panels = (N + 31) / 32;
  const int f = static_cast<int>(fmt);
  const int64_t block = gguf_superblocks(f) ? 256 : 32;
  TORCH_CHECK(K % block == 0 && K > 0, "gguf_linear: K must be a positive multiple of ", block, " for this format");
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() &&
              packed.numel() == panels * gguf_panel_bytes(f, B), "packed weight does not match x / N / fmt");
  TORCH_CHECK(!bias.has_value() || (bias->scalar_type() == at::kFloat && bias->is_contiguous() &&
                                    bias->numel() == N), "bias: fp32 [N]");
  TORCH_CHECK(!norm.has_value() || (norm->scalar_type() == at::kFloat && norm->is_contiguous() &&
                                    norm->numel() == K), "norm: fp32 [K]");
  at::Tensor y = at::empty({M, N}, x.options().dtype(at::kFloat));
  if (M == 0 || N == 0) return y;
  const int64_t rows = M * P;  // sub-rows
  at::Tensor xq = at::empty({(rows + 15) * K}, x.options().dtype(at::kChar));  // AMX loads 16 rows at a time
  at::Tensor dx = at::empty({rows * B}, x.options().dtype(at::kFloat));
  at::Tensor xs = at::empty({2, rows * B}, x.options().dtype(at::kInt));  // block sums, first-half sums
  int8_t* xqp = xq.data_ptr<int8_t>();
  float* dxp = dx.data_ptr<float>();
  int32_t* xsp = xs.data_ptr<int32_t>();
  int32_t* xhp = xsp + rows * B;
  const float* g = norm.has_value() ? norm->data_ptr<float>() : nullptr;
  const int64_t ldx = x.stride(0);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  const void* xp = x.data_ptr();
  at::parallel_for(0, M, M >= 32 ? 8 : M + 1, [&](int64_t m0, int64_t m1) {  // as w8a8_linear
    std::vector<float> v(K);
    const float e = static_cast<float>(eps);
    if (bf16)
      isa::gguf_quantize_rows(static_cast<const uint16_t*>(xp) + m0 * ldx, ldx, m1 - m0, K, P, g, e, v.data(),
                              xqp + m0 * P * K, dxp + m0 * P * B, xsp + m0 * P * B, xhp + m0 * P * B);
    else
      isa::gguf_quantize_rows(static_cast<const float*>(xp) + m0 * ldx, ldx, m1 - m0, K, P, g, e, v.data(),
                              xqp + m0 * P * K, dxp + m0 * P * B, xsp + m0 * P * B, xhp + m0 * P * B);
  });
  // dx * float(xs), the float step's row term, once per call (not per tile and panel); P = 2:
  // at the row's second sub-row, dx1 * float(256 xs_0 + xs_1) (gguf.h)
  std::vector<float> xm(rows * B);
  for (int64_t i = 0; i < rows * B; ++i) {
    const int32_t x = P == 2 && i / B % 2 ? 256 * xsp[i - B] + xsp[i] : xsp[i];
    xm[i] = dxp[i] * static_cast<float>(x);
  }
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {  // contiguous weight ranges
    std::vector<float> acc(32 * std::min(rows, isa::kGgufRowBlock));
    isa::gguf_panels(*loop, f, p0, p1, xqp, dxp, xsp, xhp, xm.data(), rows, P, K, wp, bp, yp, N, acc.data());
  });
  return y;
}

// packed: ggml.py's panel layout of format fmt for an [N, K] weight; out: a contiguous fp32 or
// bf16 [N, K] tensor the values are written to (gguf_dequant.h), for prompt chunks' matmuls.
void gguf_dequantize(const at::Tensor& packed, int64_t fmt, int64_t N, at::Tensor& out) {
  require_cpu();
  TORCH_CHECK(fmt >= 0 && fmt < kGgufFormats, "gguf_dequantize: fmt must be 0-5 (Q4_0, Q4_1, Q8_0, Q5_0, Q4_K, Q6_K)");
  TORCH_CHECK(out.dim() == 2 && out.size(0) == N && out.is_contiguous() &&
              (out.scalar_type() == at::kFloat || out.scalar_type() == at::kBFloat16),
              "gguf_dequantize: out must be a contiguous fp32 or bf16 [N, K]");
  const int64_t K = out.size(1), B = K / 32, panels = (N + 31) / 32;
  const int f = static_cast<int>(fmt);
  const int64_t block = gguf_superblocks(f) ? 256 : 32;
  TORCH_CHECK(K % block == 0 && K > 0, "gguf_dequantize: K must be a positive multiple of ", block, " for this format");
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() &&
              packed.numel() == panels * gguf_panel_bytes(f, B), "packed weight does not match out / fmt");
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const bool bf16 = out.scalar_type() == at::kBFloat16;
  void* op = out.data_ptr();
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    if (bf16) isa::gguf_dequantize_panels(f, wp, p0, p1, K, N, static_cast<uint16_t*>(op));
    else isa::gguf_dequantize_panels(f, wp, p0, p1, K, N, static_cast<float*>(op));
  });
}

// x [M, K] fp32 (rows contiguous); w [N, K] fp32 or bf16, contiguous (the model's tensor as
// stored); bias fp32 [N] or None; norm: RMSNorm weight fp32 [K] to apply to each row first (with
// eps), or None. Returns fp32 [M, N]: y = x' @ w.T (+ bias), each output one fixed dot product
// (linear.h), so a row's bits depend on that row alone.
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                  const c10::optional<at::Tensor>& norm, double eps) {
  require_cpu();
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.stride(1) == 1,
              "linear: x must be fp32 [M, K] with contiguous rows");
  TORCH_CHECK(w.dim() == 2 && (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16) &&
              w.is_contiguous(), "linear: w must be a contiguous fp32 or bf16 [N, K]");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(w.size(1) == K, "linear: x has ", K, " features, w ", w.size(1));
  TORCH_CHECK(!bias.has_value() || (bias->scalar_type() == at::kFloat && bias->is_contiguous() &&
                                    bias->numel() == N), "linear: bias must be fp32 [N]");
  TORCH_CHECK(!norm.has_value() || (norm->scalar_type() == at::kFloat && norm->is_contiguous() &&
                                    norm->numel() == K), "linear: norm must be fp32 [K]");
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xp = x.data_ptr<float>();
  int64_t ldx = M > 1 ? x.stride(0) : K;
  at::Tensor xn;
  if (norm.has_value()) {  // the normalised rows, once for every channel
    xn = at::empty({M, K}, x.options());
    const float* g = norm->data_ptr<float>();
    float* xnp = xn.data_ptr<float>();
    const float e = static_cast<float>(eps);
    at::parallel_for(0, M, M >= 32 ? 8 : M + 1, [&](int64_t m0, int64_t m1) {
      isa::rms_norm_rows(xp + m0 * ldx, ldx, m1 - m0, K, g, e, xnp + m0 * K, K);
    });
    xp = xnp, ldx = K;
  }
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const bool bf16 = w.scalar_type() == at::kBFloat16;
  const void* wp = w.data_ptr();
  // Output channels split across threads in contiguous ranges of whole blocks.
  constexpr int64_t C = isa::kLinCols;
  at::parallel_for(0, (N + C - 1) / C, 1, [&](int64_t b0, int64_t b1) {
    const int64_t n0 = b0 * C, n1 = std::min(b1 * C, N);
    std::vector<float> acc(isa::linear_acc_floats(M) + 16);  // the row tiles' accumulators
    float* ap = acc.data() + (-reinterpret_cast<uintptr_t>(acc.data()) / 4 & 15);  // 64-byte aligned
    if (bf16) {
      std::vector<float> wf(M > isa::kLinRows ? C * K : 0);  // a block's weights widened, for row tiles after the first
      isa::linear_channels(xp, ldx, M, static_cast<const uint16_t*>(wp), K, bp, yp, N, n0, n1, ap, wf.data());
    } else {
      isa::linear_channels(xp, ldx, M, static_cast<const float*>(wp), K, bp, yp, N, n0, n1, ap, nullptr);
    }
  });
  return y;
}

#include "decoder.h"

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.attr("ISA") = PARASPEC_ISA;
  m.attr("VERSION") = 20;  // bumped when a signature or what it accepts changes: the Python side ignores a stale build
  m.def("cpu_supported", &cpu_supported, "this CPU (CPUID, OS state saving) runs every kernel here");
  m.def("w8a8_variants", &variant_names, "the W8A8 inner loops this CPU runs, best first");
  m.def("attention", &attention, "decode / draft-verify attention (row-invariant: a fixed fp32 operation order per row and head)",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("start"), py::arg("visible"), py::arg("scale"),
        py::arg("order") = py::none());
  m.def("rope_attention", &rope_attention, "rotary embedding of q and k, their cache write, then attention",
        py::arg("qkv"), py::arg("cos"), py::arg("sin"), py::arg("k"), py::arg("v"), py::arg("length"),
        py::arg("start"), py::arg("visible"), py::arg("scale"), py::arg("order") = py::none());
  m.def("w8a8_linear", &w8a8_linear, "per-row W8A8 linear", py::arg("x"), py::arg("packed"),
        py::arg("comp"), py::arg("w_scale"), py::arg("bias"), py::arg("n"), py::arg("passes"),
        py::arg("norm") = py::none(), py::arg("eps") = 0.0, py::arg("variant") = "");
  m.def("gguf_linear", &gguf_linear, "per-row GGUF block-quantised linear (Q4_0, Q4_1, Q8_0, Q5_0, Q4_K, Q6_K)", py::arg("x"),
        py::arg("packed"), py::arg("fmt"), py::arg("n"), py::arg("passes"), py::arg("bias") = py::none(),
        py::arg("norm") = py::none(),
        py::arg("eps") = 0.0, py::arg("variant") = "");
  m.def("gguf_dequantize", &gguf_dequantize, "GGUF packed panels -> fp32/bf16 [N, K] (prompt matmuls)",
        py::arg("packed"), py::arg("fmt"), py::arg("n"), py::arg("out"));
  m.def("linear", &linear, "row-invariant fp32/bf16-weight linear, optional fused RMSNorm", py::arg("x"),
        py::arg("w"), py::arg("bias") = py::none(), py::arg("norm") = py::none(), py::arg("eps") = 0.0);
  py::class_<GgufDecoder>(m, "GgufDecoder", "a decode / verify forward's layers on GGUF linears, one call (decoder.h)")
      .def(py::init<std::vector<at::Tensor>, std::vector<int64_t>, std::vector<int64_t>, std::vector<int64_t>,
                    std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>, double, std::string,
                    int64_t, int64_t, int64_t, double>(),
           py::arg("packed"), py::arg("fmts"), py::arg("ns"), py::arg("passes"), py::arg("biases"),
           py::arg("attn_norms"), py::arg("ffn_norms"), py::arg("eps"), py::arg("variant"), py::arg("n_heads"),
           py::arg("n_kv"), py::arg("head_dim"), py::arg("scale"))
      .def("forward", &GgufDecoder::forward, py::call_guard<py::gil_scoped_release>(), py::arg("x"), py::arg("cos"),
           py::arg("sin"), py::arg("ks"), py::arg("vs"), py::arg("rows"), py::arg("lengths"), py::arg("starts"),
           py::arg("masks"), py::arg("orders"));
}
