// Dense linear with fp32 or bf16 weights, row-invariant by construction:
//   y[m, n] = dot(x'[m], W[n]) (+ b[n]),  x' = x, or RMSNorm(x) * g when a norm is fused.
// Written once over isa_*.h's vector API; the tensor glue (checks, threads) is in kernels.cpp.
//
// The numerics, which every row, tile, thread and both modules follow instruction for instruction:
//   acc (16 fp32 lanes) = 0
//   for k0 = 0, 16, 32, ... < K:  acc = fma(x'[m, k0:k0+16], w[n, k0:k0+16], acc)
//                                 (lane j takes k = k0 + j; lanes past K load 0 for x and w)
//   y[m, n] = hsum(acc) (+ b[n])  (hsum: _mm512_reduce_add_ps's order, vec.h; one fp32 add)
// bf16 weights are widened exactly (bits << 16); x' stays fp32. The fused norm, per row:
//   ss (16 lanes) = 0;  for k0: ss = ss + x[m, k0:k0+16] * x[m, k0:k0+16]   (mul, then add)
//   r = 1 / sqrt(hsum(ss) / K + eps)      (fp32: sqrtss, then a division)
//   x'[m, k] = (x[m, k] * r) * g[k]
// Which rows or channels share a register tile, where a tile's sums are reduced (sum8, the same
// additions as hsum), the thread that runs a channel: none of it changes a single operation of
// the sequence above, so a row's outputs are the same bits alone or among any rows, at any place,
// on any thread count, in either module (two ymm per vector on AVX2, one zmm on AVX-512).
//
// Speed: decoding is memory-bound on the weights, so each weight row leaves memory once per call
// for all the rows: a block of C channels (C rows of W, one contiguous range) is read by the first
// register tile of R rows while the next block is prefetched, then stays in L1/L2 for the other
// row tiles. A tile holds R x C accumulators in registers; each x chunk is loaded once per tile
// and used for the C channels, each weight chunk once and used for the R rows.
namespace isa {

// R rows (x + r * ldx) times C channels (w + c * K) -> y[r * ldy + c]. pf: the bytes to prefetch
// while this tile runs (the next channel block, C * K weights, at the pace this one is read), or
// null.
template <int R, int C, typename W>
void linear_tile(const float* x, int64_t ldx, const W* w, int64_t K, const float* bias, float* y, int64_t ldy,
                 const char* pf) {
  constexpr int64_t step = C * 16 * static_cast<int64_t>(sizeof(W));  // weight bytes per chunk
  F16 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = zero();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    if (pf) {
      for (int64_t o = 0; o < step; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
      pf += step;
    }
    F16 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = load(x + r * ldx + k);
    for (int c = 0; c < C; ++c) {
      const F16 wv = load(w + c * K + k);
      for (int r = 0; r < R; ++r) acc[r][c] = fmadd(xv[r], wv, acc[r][c]);
    }
  }
  if (k < K) {
    const int64_t n = K - k;
    F16 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = loadn(x + r * ldx + k, n);
    for (int c = 0; c < C; ++c) {
      const F16 wv = loadn(w + c * K + k, n);
      for (int r = 0; r < R; ++r) acc[r][c] = fmadd(xv[r], wv, acc[r][c]);
    }
  }
  // the R * C sums, 8 at a time (sum8: lane j is hsum of the j-th)
  constexpr int T = R * C;
  for (int t0 = 0; t0 < T; t0 += 8) {
    __m256 f[8];
    for (int j = 0; j < 8; ++j) f[j] = t0 + j < T ? fold(acc[(t0 + j) / C][(t0 + j) % C]) : _mm256_setzero_ps();
    alignas(32) float s[8];
    _mm256_store_ps(s, sum8(f));
    for (int j = 0; j < 8 && t0 + j < T; ++j) {
      const int r = (t0 + j) / C, c = (t0 + j) % C;
      y[r * ldy + c] = bias ? s[j] + bias[c] : s[j];
    }
  }
}

// linear_tile<r, C> for a run-time r in [1, kLinRows].
template <int C, typename W, int R = kLinRows>
void linear_tile_r(int64_t r, const float* x, int64_t ldx, const W* w, int64_t K, const float* bias, float* y,
                   int64_t ldy, const char* pf) {
  if constexpr (R > 1)
    if (r < R) return linear_tile_r<C, W, R - 1>(r, x, ldx, w, K, bias, y, ldy, pf);
  linear_tile<R, C, W>(x, ldx, w, K, bias, y, ldy, pf);
}

// Channels [n0, n1) for all M rows (one thread's share: a contiguous weight range): blocks of
// kLinCols channels (the last, narrower one channel at a time), each in row tiles of kLinRows.
template <typename W>
void linear_channels(const float* x, int64_t ldx, int64_t M, const W* w, int64_t K, const float* bias, float* y,
                     int64_t N, int64_t n0, int64_t n1) {
  constexpr int C = kLinCols;
  for (int64_t n = n0; n < n1;) {
    const int64_t c = n1 - n >= C ? C : 1;
    const W* wn = w + n * K;
    const char* next = reinterpret_cast<const char*>(wn + c * K);  // the next block, prefetched by the first tile
    for (int64_t m = 0; m < M; m += kLinRows) {
      const char* pf = m == 0 ? next : nullptr;
      const int64_t r = std::min<int64_t>(kLinRows, M - m);
      if (c == C) linear_tile_r<C, W>(r, x + m * ldx, ldx, wn, K, bias ? bias + n : nullptr, y + m * N + n, N, pf);
      else linear_tile_r<1, W>(r, x + m * ldx, ldx, wn, K, bias ? bias + n : nullptr, y + m * N + n, N, pf);
    }
    n += c;
  }
}

// out[m] = (x[m] * r_m) * g with r_m = 1 / sqrt(sum_k x[m, k]^2 / K + eps), the sum of squares in
// 16 lanes (mul, then add) reduced by hsum, for rows [0, M).
inline void rms_norm_rows(const float* x, int64_t ldx, int64_t M, int64_t K, const float* g, float eps, float* out,
                          int64_t ldo) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * ldx;
    F16 ss = zero();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      const F16 f = load(xm + k);
      ss = add(ss, mul(f, f));
    }
    if (k < K) {
      const F16 f = loadn(xm + k, K - k);
      ss = add(ss, mul(f, f));
    }
    const F16 r = set1(1.f / std::sqrt(hsum(ss) / static_cast<float>(K) + eps));
    float* om = out + m * ldo;
    for (k = 0; k + 16 <= K; k += 16) store(om + k, mul(mul(load(xm + k), r), load(g + k)));
    if (k < K) storen(om + k, mul(mul(loadn(xm + k, K - k), r), loadn(g + k, K - k)), K - k);
  }
}

}  // namespace isa
