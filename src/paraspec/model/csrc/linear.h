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
// hsum's additions pair lanes (j, j + 8), then (j, j + 4), (j, j + 2), (j, j + 1) of what is left.
// The instructions a row's output sees, AVX-512: per whole chunk one vfmadd231ps (x chunk from
// vmovups; weights from vmovups, or for bf16 vpmovzxwd + vpslld, direct or into the block's
// widened copy: the same fp32 values), the partial chunk with zero-masked loads and one FMA, then
// sum16's vshuff32x4 / vshufps / vaddps tree (the pairing above) and one vaddss for the bias.
// AVX2: the same per lane, each 16-lane vector two ymm (bf16 widened by vpshufb), sum8's tree.
// Which rows or channels share a register tile, where a tile's sums are reduced (sum16 does 16 at
// once), the thread that runs a channel: none of it changes a single operation of the sequence
// above, so a row's outputs are the same bits alone or among any rows, at any place, on any
// thread count, in either module.
//
// Speed: decoding is memory-bound on the weights, so each weight row leaves memory once per call
// for all the rows: a block of kLinCols channels (rows of W, one contiguous range) is run in
// register tiles of up to kLinRows rows (R x C accumulators; each x chunk loaded once per tile
// and used for the C channels, each weight chunk once and used for the R rows), each tile
// prefetching its share of the next block, spread over its steps, so the weights stream at the
// pace they are used. bf16 blocks with more than one row tile are widened once into an fp32 copy
// in L1 that the tiles read (widening costs about what the FMAs it feeds cost, per row tile
// otherwise), and K > kLinSeg is walked in segments that keep the tiles' x and weights in L1.
// Threads take contiguous ranges of blocks.
namespace isa {

// The phases of a tile are separate functions that pass the R x C accumulators through memory
// (acc: 16 floats each, row-major): with the sums in the same function GCC keeps the
// accumulators in a stack array and stores every one of them on every step of the loop.

// acc (+)= the sums over the whole 16-float chunks k in [k0, k1) (from 0 when init, else
// continuing acc's), for R <= 8 rows x + r * ldx and C <= 8 channels w + c * K. Meanwhile the
// cache lines [pf, pf + pf_bytes) are prefetched, spread evenly over the chunks (a share of the
// next channel block: the weights stream from memory at the pace the block's row tiles use them).
template <int R, int C, typename W>
__attribute__((noinline)) void linear_main(const float* x, int64_t ldx, const W* w, int64_t K, int64_t k0,
                                           int64_t k1, bool init, const char* pf, int64_t pf_bytes, float* acc) {
  static_assert(R >= 1 && R <= 8 && C >= 1 && C <= 8, "tile");
  const int64_t chunks = (k1 - k0) / 16;
  int64_t due = 0;  // prefetch bytes owed, in units of 1 / chunks of a byte
  F16 a[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) a[r][c] = init ? zero() : load(acc + (r * C + c) * 16);
  for (int64_t k = k0; k < k1; k += 16) {
    for (due += pf_bytes; due > 0; due -= 64 * chunks, pf += 64) _mm_prefetch(pf, _MM_HINT_T1);  // to L2 (T0: same or slower)
    F16 xv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) xv[r] = load(x + r * ldx + k);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const F16 wv = load(w + c * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) a[r][c] = fmadd(xv[r], wv, a[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) store(acc + (r * C + c) * 16, a[r][c]);
}

// acc += the last, partial chunk k0 = K / 16 * 16 (masked loads: lanes past K are 0 in x and w)
template <int R, int C, typename W>
__attribute__((noinline)) void linear_tail(const float* x, int64_t ldx, const W* w, int64_t K, float* acc) {
  const int64_t k = K / 16 * 16, n = K - k;
  F16 xv[R];
  for (int r = 0; r < R; ++r) xv[r] = loadn(x + r * ldx + k, n);
  for (int c = 0; c < C; ++c) {
    const F16 wv = loadn(w + c * K + k, n);
    for (int r = 0; r < R; ++r) store(acc + (r * C + c) * 16, fmadd(xv[r], wv, load(acc + (r * C + c) * 16)));
  }
}

// y[r * ldy + c] = hsum(acc) (+ bias[c]) for R x C accumulators, 16 at a time (sum16: lane j is
// hsum of the j-th vector; the last group padded with zeros).
template <int R, int C>
void linear_sums(const float* acc, const float* bias, float* y, int64_t ldy) {
  constexpr int T = R * C;
  alignas(64) float s[(T + 15) / 16 * 16];
  for (int t0 = 0; t0 < T; t0 += 16) {
    F16 a[16];
    for (int j = 0; j < 16; ++j) a[j] = t0 + j < T ? load(acc + (t0 + j) * 16) : zero();
    store(s + t0, sum16(a));
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) y[r * ldy + c] = bias ? s[r * C + c] + bias[c] : s[r * C + c];
}

// One register tile's share of a block: chunks [k0, k1) of R rows x C channels, accumulators in
// acc (R * C * 16 floats; from zero when init), the whole chunks from wm (the weights, or the
// block's widened copy), prefetching [pf, pf + pf_bytes); with `last`, the partial chunk from w
// (the weights, C rows of K) and the sums y[r * ldy + c] = hsum(acc) (+ bias[c]).
template <int R, int C, typename WM, typename W>
void linear_tile(const float* x, int64_t ldx, const WM* wm, const W* w, int64_t K, int64_t k0, int64_t k1,
                 bool init, bool last, const float* bias, float* y, int64_t ldy, const char* pf, int64_t pf_bytes,
                 float* acc) {
  linear_main<R, C, WM>(x, ldx, wm, K, k0, k1, init, pf, pf_bytes, acc);
  if (!last) return;
  if (K % 16) linear_tail<R, C, W>(x, ldx, w, K, acc);
  linear_sums<R, C>(acc, bias, y, ldy);
}

// linear_tile<r, ...> for a run-time r in [1, kLinRows].
template <int C, typename WM, typename W, int R = kLinRows>
void linear_tile_r(int64_t r, const float* x, int64_t ldx, const WM* wm, const W* w, int64_t K, int64_t k0,
                   int64_t k1, bool init, bool last, const float* bias, float* y, int64_t ldy, const char* pf,
                   int64_t pf_bytes, float* acc) {
  if constexpr (R > 1)
    if (r < R)
      return linear_tile_r<C, WM, W, R - 1>(r, x, ldx, wm, w, K, k0, k1, init, last, bias, y, ldy, pf, pf_bytes,
                                            acc);
  linear_tile<R, C, WM, W>(x, ldx, wm, w, K, k0, k1, init, last, bias, y, ldy, pf, pf_bytes, acc);
}

// wf[c * K + k] = w[c * K + k] widened, for C rows and the whole chunks k in [k0, k1)
template <int C>
__attribute__((noinline)) void linear_widen(const uint16_t* w, int64_t K, int64_t k0, int64_t k1, float* wf) {
  for (int c = 0; c < C; ++c)
    for (int64_t k = k0; k < k1; k += 16) store(wf + c * K + k, load(w + c * K + k));
}

// One block of C channels (w: C rows of K) for all M rows, in row tiles of kLinRows, each tile
// prefetching its share of the next block (next, C * K weights). With more than one tile, K is
// walked in segments of kLinSeg floats, every tile over a segment before the next one (the
// segment's x rows and weights stay in L1; each tile's accumulators wait in acc, tiles * kLinRows
// * C * 16 floats), and bf16 weights are widened once per segment into wf (C * K floats) for all
// the tiles. (Widening in the first tile's loop, storing as it goes, was 2-4x slower on some
// alignments of x: stores and loads 4 KB apart.) A lane's FMAs run in k order either way:
// segments only pause them.
template <int C, typename W>
void linear_block(const float* x, int64_t ldx, int64_t M, const W* w, int64_t K, const float* bias, float* y,
                  int64_t ldy, const char* next, float* acc, float* wf) {
  constexpr int R = kLinRows;
  const int64_t bytes = C * K * static_cast<int64_t>(sizeof(W)), tiles = (M + R - 1) / R, whole = K / 16 * 16;
  if (tiles == 1)
    return linear_tile_r<C, W, W>(M, x, ldx, w, w, K, 0, whole, true, true, bias, y, ldy, next, bytes, acc);
  const int64_t segs = std::max<int64_t>(1, (whole + kLinSeg - 1) / kLinSeg);  // of equal length in chunks
  const int64_t seg = (whole / 16 + segs - 1) / segs * 16;
  const int64_t share = (bytes / (tiles * segs) + 63) / 64 * 64;  // whole lines per tile and segment
  constexpr bool widen = !std::is_same<W, float>::value;
  int64_t done = 0;  // bytes of the next block prefetched
  for (int64_t s = 0; s < segs; ++s) {
    const int64_t k0 = s * seg, k1 = std::min(k0 + seg, whole);
    const bool init = s == 0, last = s + 1 == segs;
    if constexpr (widen) linear_widen<C>(w, K, k0, k1, wf);
    for (int64_t m = 0; m < M; m += R) {
      const int64_t r = std::min<int64_t>(R, M - m);
      const int64_t pf_bytes = last && m + R >= M ? bytes - done : std::min(share, bytes - done);
      float* at = acc + m / R * (R * C * 16);
      if constexpr (widen)
        linear_tile_r<C, float, W>(r, x + m * ldx, ldx, wf, w, K, k0, k1, init, last, bias, y + m * ldy, ldy,
                                   next + done, pf_bytes, at);
      else
        linear_tile_r<C, W, W>(r, x + m * ldx, ldx, w, w, K, k0, k1, init, last, bias, y + m * ldy, ldy, next + done,
                               pf_bytes, at);
      done += pf_bytes;
    }
  }
}

// Channels [n0, n1) for all M rows (one thread's share: a contiguous weight range): blocks of
// kLinCols channels (the last, narrower one channel at a time). Scratch: acc
// linear_acc_floats(M), wf kLinCols * K floats.
inline int64_t linear_acc_floats(int64_t M) { return (M + kLinRows - 1) / kLinRows * kLinRows * kLinCols * 16; }
template <typename W>
void linear_channels(const float* x, int64_t ldx, int64_t M, const W* w, int64_t K, const float* bias, float* y,
                     int64_t N, int64_t n0, int64_t n1, float* acc, float* wf) {
  constexpr int C = kLinCols;
  for (int64_t n = n0; n < n1;) {
    const int64_t c = n1 - n >= C ? C : 1;
    const W* wn = w + n * K;
    const char* next = reinterpret_cast<const char*>(wn + c * K);
    const float* b = bias ? bias + n : nullptr;
    if (c == C) linear_block<C, W>(x, ldx, M, wn, K, b, y + n, N, next, acc, wf);
    else linear_block<1, W>(x, ldx, M, wn, K, b, y + n, N, next, acc, wf);
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
