// W8A8 linear for AVX512-VNNI CPUs, one call per linear (activation quantisation, int8 GEMM
// and rescale fused):  y = (sum_p float(q_p(x) @ Wq.T) * sx_p) * sw + b.
//
// Activations are quantised per row inside the call (sx = amax / 127), so a row's output is a
// function of that row alone: the int8 dot products accumulate exactly in int32 and the float
// epilogue is elementwise, whatever M is or how rows are tiled. With passes = 2 the rounding
// residual of each row is quantised again (its own per-row scale) and run as a second sub-row:
// the weights are streamed once either way, and it removes most of the activation error.
//
// vpdpbusd multiplies u8 by s8, so activations are stored as q + 128 (in [1, 255]) and the
// excess 128 * sum_k W[n, k] (`comp`, precomputed) is subtracted from the int32 sums.
//
// Weight layout (packed by quant.py): [Np/32][Kp/4][32][4] int8, i.e. panels of 32 output
// channels, each a single contiguous stream of 128 bytes per 4 input features; one zmm load
// gives 16 channels x 4 features. N is padded to 32 and K to 4 with zero weights.
//
// Build: python src/paraspec/model/csrc/build.py. -ffp-contract=off matters: with FMA the
// epilogue would round differently from quant.py's torch fallback.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t kPanel = 32;  // output channels per panel (2 zmm of int32 accumulators)
constexpr int64_t kMaxRows = 8;  // rows per register tile: 8 x 2 accumulators + 2 weights + 1 x
constexpr int64_t kPrefetch = 8192;  // bytes ahead in the weight stream
constexpr int64_t kChunk = 64;       // k4 steps (8 KB of a panel) per tile switch
constexpr int64_t kRowBlock = 256;   // sub-rows per pass over the weights (a multiple of kMaxRows)
struct alignas(64) Zmm { int32_t v[16]; };  // storage for one __m512i (C++17 aligned new)

inline __m512 to_float(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 to_float(const at::BFloat16* p, __mmask16 m) {
  __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline __mmask16 first(int64_t n) {  // lanes [0, min(n, 16))
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

// q[:K] = round(v * (127 / amax)) + 128, q[K:Kp] = 128 (zero); returns the scale amax / 127.
// An all-zero v gets inv = 0, hence q = 0 and scale 0. With `residual`, v becomes what the
// rounding lost, v - q * scale, for a second pass.
float quantize_row(float* v, int64_t K, int64_t Kp, uint8_t* q, bool residual) {
  __m512 amax = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 16)
    amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_maskz_loadu_ps(first(K - k), v + k)));
  const float a = _mm512_reduce_max_ps(amax);  // max is exact: no order dependence
  // Spelled as quant.py's torch ops round: reciprocal then * 127, and * float(1 / 127.0).
  const __m512 inv = _mm512_set1_ps(a > 0.f ? (1.f / a) * 127.f : 0.f);
  const float scale = a * static_cast<float>(1.0 / 127.0);
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i off = _mm512_set1_epi32(128);
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 m = first(K - k);
    const __m512 x = _mm512_maskz_loadu_ps(m, v + k);
    const __m512i i = _mm512_cvtps_epi32(_mm512_mul_ps(x, inv));  // half to even, as torch.round
    _mm_mask_storeu_epi8(q + k, m, _mm512_cvtepi32_epi8(_mm512_add_epi32(i, off)));
    if (residual) _mm512_mask_storeu_ps(v + k, m, _mm512_sub_ps(x, _mm512_mul_ps(_mm512_cvtepi32_ps(i), vs)));
  }
  std::memset(q + K, 128, Kp - K);
  return scale;
}

// Row m of x -> P sub-rows m * P + p of xq (u8, q + 128) and sx: pass 0 quantises x, pass 1
// (P = 2) quantises the residual x - q0 * sx0. With `norm` (gamma, K floats) the row is first
// RMS-normalised: x * gamma is quantised and 1 / rms(x) multiplies the row's scales, which is
// the same thing because symmetric per-row quantisation is invariant to a per-row factor.
template <typename T>
void quantize_rows(const T* x, int64_t ldx, int64_t M, int64_t K, int64_t Kp, int P,
                   const float* norm, float eps, uint8_t* xq, float* sx) {
  std::vector<float> v(K);
  for (int64_t m = 0; m < M; ++m) {
    __m512 ss = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
      const __mmask16 mk = first(K - k);
      __m512 f = to_float(x + m * ldx + k, mk);
      if (norm) {
        ss = _mm512_add_ps(ss, _mm512_mul_ps(f, f));  // fixed lane order: depends on K only
        f = _mm512_mul_ps(f, _mm512_maskz_loadu_ps(mk, norm + k));
      }
      _mm512_mask_storeu_ps(v.data() + k, mk, f);
    }
    const float r = norm ? 1.f / std::sqrt(_mm512_reduce_add_ps(ss) / static_cast<float>(K) + eps) : 1.f;
    for (int p = 0; p < P; ++p)
      sx[m * P + p] = quantize_row(v.data(), K, Kp, xq + (m * P + p) * Kp, p + 1 < P) * r;
  }
}

// R sub-rows (R <= 8) times one panel over k4 steps [k0, k1): int32 dot products accumulated
// into acc[2 * r + half] (starting from zero when `init`).
template <int R>
void accumulate(const int32_t* xw, int64_t K4, const int8_t* w, int64_t k0, int64_t k1,
                __m512i* acc, bool init) {
  // Named accumulators (not an array): GCC 12 otherwise copies every register once per step.
  const __m512i z = _mm512_setzero_si512();
#define PS_ACC(i)                                                  \
  __m512i a##i##0 = (R > i && !init) ? acc[2 * i] : z;             \
  __m512i a##i##1 = (R > i && !init) ? acc[2 * i + 1] : z;
  PS_ACC(0) PS_ACC(1) PS_ACC(2) PS_ACC(3) PS_ACC(4) PS_ACC(5) PS_ACC(6) PS_ACC(7)
#define PS_ROW(i)                                                  \
  if constexpr (R > i) {                                           \
    const __m512i xb = _mm512_set1_epi32(xw[i * K4 + k]);          \
    a##i##0 = _mm512_dpbusd_epi32(a##i##0, xb, w0);                \
    a##i##1 = _mm512_dpbusd_epi32(a##i##1, xb, w1);                \
  }
  for (int64_t k = k0; k < k1; ++k) {
    const int8_t* wk = w + k * 128;
    // Weights stream from DRAM once per token: prefetch 64 steps ahead (a thread's panels are
    // contiguous, so this runs on into the next panel). Measured: M=8 -15%, M=16 -30%, M=1 same.
    _mm_prefetch(reinterpret_cast<const char*>(wk) + kPrefetch, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wk) + kPrefetch + 64, _MM_HINT_T0);
    const __m512i w0 = _mm512_loadu_si512(wk);
    const __m512i w1 = _mm512_loadu_si512(wk + 64);
    PS_ROW(0) PS_ROW(1) PS_ROW(2) PS_ROW(3) PS_ROW(4) PS_ROW(5) PS_ROW(6) PS_ROW(7)
  }
#define PS_OUT(i) if constexpr (R > i) { acc[2 * i] = a##i##0; acc[2 * i + 1] = a##i##1; }
  PS_OUT(0) PS_OUT(1) PS_OUT(2) PS_OUT(3) PS_OUT(4) PS_OUT(5) PS_OUT(6) PS_OUT(7)
#undef PS_OUT
#undef PS_ROW
#undef PS_ACC
}

// y = (sum_p float(acc_p - comp) * sx_p) * sw (+ b) for the R / P rows of a tile and the 32
// channels of a panel from n0, stored with a mask past N.
template <int R, int P>
void epilogue(const __m512i* acc, const int32_t* comp, const float* sw, const float* sx,
              const float* bias, float* y, int64_t ldy, int64_t n0, int64_t N) {
  for (int h = 0; h < 2; ++h) {
    const int64_t n = n0 + 16 * h;
    if (n >= N) break;
    const __mmask16 mask = first(N - n);
    const __m512i c = _mm512_loadu_si512(comp + n);
    const __m512 s = _mm512_loadu_ps(sw + n);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + n) : _mm512_setzero_ps();
    for (int r = 0; r < R; r += P) {
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[2 * r + h], c)),
                               _mm512_set1_ps(sx[r]));
      if constexpr (P == 2)
        v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[2 * r + 2 + h], c)),
                                           _mm512_set1_ps(sx[r + 1])));
      v = _mm512_mul_ps(v, s);
      if (bias) v = _mm512_add_ps(v, b);
      _mm512_mask_storeu_ps(y + (r / P) * ldy + n, mask, v);
    }
  }
}

using AccFn = void (*)(const int32_t*, int64_t, const int8_t*, int64_t, int64_t, __m512i*, bool);
constexpr AccFn kAccFns[kMaxRows + 1] = {nullptr,        accumulate<1>, accumulate<2>,
                                         accumulate<3>,  accumulate<4>, accumulate<5>,
                                         accumulate<6>,  accumulate<7>, accumulate<8>};
using EpiFn = void (*)(const __m512i*, const int32_t*, const float*, const float*, const float*,
                       float*, int64_t, int64_t, int64_t);
constexpr EpiFn kEpiFns[2][kMaxRows + 1] = {  // [P - 1][sub-rows in the tile]
    {nullptr, epilogue<1, 1>, epilogue<2, 1>, epilogue<3, 1>, epilogue<4, 1>, epilogue<5, 1>,
     epilogue<6, 1>, epilogue<7, 1>, epilogue<8, 1>},
    {nullptr, nullptr, epilogue<2, 2>, nullptr, epilogue<4, 2>, nullptr, epilogue<6, 2>, nullptr,
     epilogue<8, 2>}};

// x [M, K] fp32 or bf16 (rows contiguous); packed [Np/32 * Kp/4 * 128] int8; comp [Np] int32;
// w_scale [Np] fp32; bias [N] fp32 or None; passes 1 (x in int8) or 2 (plus its int8
// residual); norm: RMSNorm weight [K] fp32 to apply to x first (with eps), or None.
// Returns fp32 [M, N].
at::Tensor w8a8_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& comp,
                       const at::Tensor& w_scale, const c10::optional<at::Tensor>& bias,
                       int64_t N, int64_t passes, const c10::optional<at::Tensor>& norm,
                       double eps) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, "x must be 2-D with contiguous rows");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, "x: fp32/bf16");
  TORCH_CHECK(passes == 1 || passes == 2, "passes must be 1 or 2");
  TORCH_CHECK(!norm.has_value() || (norm->scalar_type() == at::kFloat && norm->is_contiguous() &&
                                    norm->numel() == x.size(1)), "norm: fp32 [K]");
  const int P = static_cast<int>(passes);
  const int64_t M = x.size(0), K = x.size(1), Kp = (K + 3) / 4 * 4;
  const int64_t panels = (N + kPanel - 1) / kPanel;
  TORCH_CHECK(packed.numel() == panels * kPanel * Kp, "packed weight does not match x / N");
  at::Tensor y = at::empty({M, N}, x.options().dtype(at::kFloat));
  if (M == 0) return y;

  const int64_t rows = M * P;  // sub-rows
  at::Tensor xq = at::empty({rows * Kp}, x.options().dtype(at::kByte));
  at::Tensor sx = at::empty({rows}, x.options().dtype(at::kFloat));
  const float* g = norm.has_value() ? norm->data_ptr<float>() : nullptr;
  const int64_t ldx = x.stride(0);
  // Rows quantise independently; in parallel only when there are enough of them (prefill) to
  // pay for a second fork (~0.2 us a row here, ~2 us a fork).
  at::parallel_for(0, M, M >= 32 ? 8 : M + 1, [&](int64_t m0, int64_t m1) {
    if (x.scalar_type() == at::kFloat)
      quantize_rows(x.data_ptr<float>() + m0 * ldx, ldx, m1 - m0, K, Kp, P, g, static_cast<float>(eps),
                    xq.data_ptr<uint8_t>() + m0 * P * Kp, sx.data_ptr<float>() + m0 * P);
    else
      quantize_rows(x.data_ptr<at::BFloat16>() + m0 * ldx, ldx, m1 - m0, K, Kp, P, g,
                    static_cast<float>(eps), xq.data_ptr<uint8_t>() + m0 * P * Kp,
                    sx.data_ptr<float>() + m0 * P);
  });

  const uint8_t* xqp = xq.data_ptr<uint8_t>();
  const float* sxp = sx.data_ptr<float>();
  const int8_t* wp = packed.data_ptr<int8_t>();
  const int32_t* cp = comp.data_ptr<int32_t>();
  const float* swp = w_scale.data_ptr<float>();
  const float* bp = bias.has_value() ? bias->data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  // Split output channels across threads (contiguous weight ranges). With more than one tile of
  // sub-rows, each panel is walked in chunks of kChunk steps and every tile runs on a chunk
  // while it sits in L1: the weights leave DRAM once, and the next chunk's prefetch overlaps
  // the other tiles' compute. Prefill-sized inputs go in blocks of kRowBlock sub-rows, so the
  // block's int8 activations stay in L2 while all the thread's panels pass.
  const int64_t K4 = Kp / 4;
  const int32_t* xw = reinterpret_cast<const int32_t*>(xqp);  // 4 u8 features as one dword
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    const int64_t max_tiles = (std::min(rows, kRowBlock) + kMaxRows - 1) / kMaxRows;
    std::vector<Zmm> buf(max_tiles * 2 * kMaxRows);  // int32 sums of a block's tiles
    __m512i* acc = reinterpret_cast<__m512i*>(buf.data());
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      const int64_t r1 = std::min(r0 + kRowBlock, rows);
      const int64_t tiles = (r1 - r0 + kMaxRows - 1) / kMaxRows;
      const int64_t chunk = tiles == 1 ? K4 : kChunk;
      for (int64_t p = p0; p < p1; ++p) {
        const int8_t* w = wp + p * kPanel * Kp;
        for (int64_t k0 = 0; k0 < K4; k0 += chunk)
          for (int64_t t = 0, r = r0; r < r1; ++t, r += kMaxRows)
            kAccFns[std::min(kMaxRows, r1 - r)](xw + r * K4, K4, w, k0, std::min(k0 + chunk, K4),
                                                acc + t * 2 * kMaxRows, k0 == 0);
        for (int64_t t = 0, r = r0; r < r1; ++t, r += kMaxRows)
          kEpiFns[P - 1][std::min(kMaxRows, r1 - r)](acc + t * 2 * kMaxRows, cp, swp, sxp + r, bp,
                                                     yp + r / P * N, N, p * kPanel, N);
      }
    }
  });
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.attr("VERSION") = 2;  // quant.py ignores a stale build whose signature differs
  m.def("w8a8_linear", &w8a8_linear, "per-row W8A8 linear (AVX512-VNNI)", py::arg("x"),
        py::arg("packed"), py::arg("comp"), py::arg("w_scale"), py::arg("bias"), py::arg("n"),
        py::arg("passes"), py::arg("norm") = py::none(), py::arg("eps") = 0.0);
}
