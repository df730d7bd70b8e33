// W8A8 linear, one call per linear (activation quantisation, int8 GEMM and rescale fused):
//   y = (sum_p float(q_p(x) @ Wq.T) * sx_p) * sw + b.
// Written once over isa_*.h's vector API; the int8 inner loops are w8a8_loop.h. The tensor
// glue (checks, threads) is in kernels.cpp, outside the target region.
//
// Activations are quantised per row inside the call (sx = amax / 127), so a row's output is a
// function of that row alone: the int8 dot products accumulate exactly in int32 and the float
// epilogue is elementwise, whatever M is or how rows are tiled. With passes = 2 the rounding
// residual of each row is quantised again (its own per-row scale) and run as a second sub-row:
// the weights are streamed once either way, and it removes most of the activation error.
//
// Stored activations: q + offset as bytes. vpdpbusd multiplies u8 by s8, so the VNNI variants
// store q + 128 (in [1, 255]) and subtract the excess 128 * sum_k W[n, k] (`comp`) from their
// sums; the AVX2 variant stores q as s8 and sums the true products. Both leave the exact
// q @ Wq.T, so every variant (and quant.py's torch path, int_dot) gives the same bits.
//
// Weight layout (packed by quant.py): [Np/32][Kp/4][32][4] int8, i.e. panels of 32 output
// channels, each a single contiguous stream of 128 bytes per 4 input features. N is padded to
// 32 and K to 4 with zero weights.
//
// The float arithmetic is spelled op for op as quant.py's torch fallback (Int8Linear._run),
// and built with -ffp-contract=off: an FMA would round differently.
namespace isa {

// q[:K] = round(v * (127 / amax)) + offset, q[K:Kp] = offset (zero); returns the scale
// amax / 127. An all-zero v gets inv = 0, hence q = 0 and scale 0. With `residual`, v becomes
// what the rounding lost, v - q * scale, for a second pass.
inline float quantize_row(float* v, int64_t K, int64_t Kp, uint8_t* q, int offset, bool residual) {
  F16 amax = zero();
  for (int64_t k = 0; k < K; k += 16) amax = max(amax, abs(loadn(v + k, K - k)));
  const float a = reduce_max(amax);  // max is exact: no order dependence
  // Spelled as quant.py's torch ops round: reciprocal then * 127, and * float(1 / 127.0).
  const F16 inv = set1(a > 0.f ? (1.f / a) * 127.f : 0.f);
  const float scale = a * static_cast<float>(1.0 / 127.0);
  const F16 vs = set1(scale);
  const I16 off = set1(static_cast<int32_t>(offset));
  for (int64_t k = 0; k < K; k += 16) {
    const F16 x = loadn(v + k, K - k);
    const I16 i = to_int(mul(x, inv));  // half to even, as torch.round
    store_bytes(q + k, add(i, off), K - k);
    if (residual) storen(v + k, sub(x, mul(to_float(i), vs)), K - k);
  }
  std::memset(q + K, offset, Kp - K);
  return scale;
}

// Row m of x -> P sub-rows m * P + p of xq and sx: pass 0 quantises x, pass 1 (P = 2) the
// residual x - q0 * sx0. With `norm` (gamma, K floats) the row is first RMS-normalised: x * gamma
// is quantised and 1 / rms(x) multiplies the row's scales, which is the same thing because
// symmetric per-row quantisation is invariant to a per-row factor. The sum of squares runs
// over 16 lanes in a fixed order (it depends on K only) and is reduced as AVX-512 reduces.
// v: K floats of scratch. T: float or uint16_t (bf16 bits).
template <typename T>
void quantize_rows(const T* x, int64_t ldx, int64_t M, int64_t K, int64_t Kp, int P, const float* norm,
                   float eps, int offset, float* v, uint8_t* xq, float* sx) {
  for (int64_t m = 0; m < M; ++m) {
    F16 ss = zero();
    for (int64_t k = 0; k < K; k += 16) {
      F16 f = loadn(x + m * ldx + k, K - k);
      if (norm) {
        ss = add(ss, mul(f, f));
        f = mul(f, loadn(norm + k, K - k));
      }
      storen(v + k, f, K - k);
    }
    const float r = norm ? 1.f / std::sqrt(hsum(ss) / static_cast<float>(K) + eps) : 1.f;
    for (int p = 0; p < P; ++p)
      sx[m * P + p] = quantize_row(v, K, Kp, xq + (m * P + p) * Kp, offset, p + 1 < P) * r;
  }
}

// y = (sum_p float(acc_p - comp) * sx_p) * sw (+ b) for sub-rows [0, rows) of a block (P of
// them per output row) and the 32 channels of a panel from n0, stored with a mask past N.
// VNNI sums carry the offset's excess (comp); AVX2 sums do not (comp = null).
inline void epilogue(const int32_t* acc, int64_t rows, int P, const int32_t* comp, const float* sw,
                     const float* sx, const float* bias, float* y, int64_t ldy, int64_t n0, int64_t N) {
  for (int h = 0; h < 2; ++h) {
    const int64_t n = n0 + 16 * h;
    if (n >= N) break;
    const I16 c = comp ? load(comp + n) : set1(0);
    const F16 s = load(sw + n);
    const F16 b = bias ? loadn(bias + n, N - n) : zero();
    for (int64_t r = 0; r < rows; r += P) {
      const int32_t* a = acc + 32 * r + 16 * h;
      F16 v = mul(to_float(sub(load(a), c)), set1(sx[r]));
      if (P == 2) v = add(v, mul(to_float(sub(load(a + 32), c)), set1(sx[r + 1])));
      v = mul(v, s);
      if (bias) v = add(v, b);
      storen(y + (r / P) * ldy + n, v, N - n);
    }
  }
}

constexpr int64_t kChunk = 64;      // k4 steps (8 KB of a panel) per tile switch
constexpr int64_t kRowBlock = 256;  // sub-rows per pass over the weights

// Panels [p0, p1) for all sub-rows (one thread's share of the output channels: a contiguous
// weight range). With more than one register tile of sub-rows, each panel is walked in chunks
// of kChunk steps and every tile runs on a chunk while it sits in L1: the weights leave DRAM
// once, and the next chunk's prefetch overlaps the other tiles' compute. Prefill-sized inputs
// go in blocks of kRowBlock sub-rows, so the block's int8 activations stay in L2 while all the
// thread's panels pass. acc: 32 * min(rows, kRowBlock) int32 of scratch.
inline void panels(const W8A8Loop& loop, int64_t p0, int64_t p1, const uint8_t* xq, const float* sx,
                   int64_t rows, int P, int64_t Kp, const int8_t* wp, const int32_t* comp,
                   const float* sw, const float* bias, float* y, int64_t N, int32_t* acc) {
  const int64_t K4 = Kp / 4, R = loop.rows;
  const int32_t* xw = reinterpret_cast<const int32_t*>(xq);  // 4 features as one dword
  if (loop.offset == 0) comp = nullptr;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t r1 = std::min(r0 + kRowBlock, rows);
    const int64_t chunk = r1 - r0 <= R ? K4 : kChunk;
    for (int64_t p = p0; p < p1; ++p) {
      const int8_t* w = wp + p * 32 * Kp;
      for (int64_t k0 = 0; k0 < K4; k0 += chunk)
        for (int64_t r = r0; r < r1; r += R)
          loop.fn[std::min(R, r1 - r)](xw + r * K4, K4, w, k0, std::min(k0 + chunk, K4),
                                       acc + (r - r0) * 32, k0 == 0);
      epilogue(acc, r1 - r0, P, comp, sw, sx + r0, bias, y + r0 / P * N, N, p * 32, N);
    }
  }
}

}  // namespace isa
