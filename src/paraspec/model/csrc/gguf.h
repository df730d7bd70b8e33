// GGUF block-quantised linears run on their stored blocks (Q4_0, Q4_1, Q8_0, Q5_0 and the
// K-quants Q4_K, Q6_K): one call per linear, activation quantisation, integer block dot products
// and the float epilogue fused. Written once over isa_*.h's vector API; the integer inner loops
// are gguf_loop.h and the tensor glue (checks, threads) is in kernels.cpp. ggml.py and
// ggml_kquants.py pack the weights and hold the torch reference, which this code follows op for
// op (built with -ffp-contract=off: no FMA).
//
// Activations are quantised per row and per 32-block, as llama.cpp's Q8_0/Q8_1 activations:
//   q[k] = round(x[k] * ((1 / amax) * 127)) (half to even),  dx = amax * (1 / 127),  xs = sum q,
//   xh = the sum of the block's first 16 q (Q6_K's 16-wide sub-blocks)
// so a row's output is a function of that row alone. (K-quants too: their 256-superblocks are
// 8 sub-blocks of 32 with their own scales, so per-32 activations, finer than llama.cpp's Q8_K
// per 256, keep one formula per 32-block.) Per output channel n and 32-block b:
//   isum = sum_k wq[n, k] * q[k]          (int32, exact: any tiling, any instruction)
//   Q4_0: t = float(isum - 8 * xs) * (d[n, b] * dx)          (weights stored as nibbles 0..15)
//   Q5_0: t = float(isum - 16 * xs) * (d[n, b] * dx)         (5-bit values 0..31)
//   Q4_1: t = float(isum) * (d[n, b] * dx) + m[n, b] * (dx * float(xs))
//   Q8_0: t = float(isum) * (d[n, b] * dx)
//   Q4_K: t = float(isum) * (ds * dx) - dm * (dx * float(xs)),  ds = d * sc[b], dm = dmin * mn[b]
//         (fp16 superblock scale times 6-bit sub-block scale: exact in fp32)
//   Q6_K: v = (isum_a - 32 xh) * sc_a + (isum_b - 32 (xs - xh)) * sc_b (isum_a/b: the block's two
//         16-wide halves, 6-bit values 0..63, sc int8; exact in int32 and in fp32, |v| < 2^24)
//         t = float(v) * (d * dx)
//   acc = acc + t, from acc = 0, over the blocks in order;  y = acc (+ bias)
// With two passes (the default, ggml.py), the block's rounding residual r = x - q * dx is
// quantised again on the tied scale dx1 = dx / 256 (exact): q1 = clamp(round(r * (inv * 256)),
// -127, 127), inv = (1 / amax) * 127 the factor q was rounded from; it is a second sub-row of the
// integer loops (the weights are streamed once either way; it removes most of the activation
// error). Per block the two sub-rows' sums combine before any float, I = 256 * isum_0 + isum_1
// (each after its offset terms; |isum_0| <= 32 * 16 * 127 for the Q4 / Q5 formats and 32 * 128 * 127
// for Q8_0, so 256x fits int32), xs = 256 * xs_0 + xs_1, and the float step above runs once per
// row with isum = I, dx = dx1 and that xs. Q6_K's v can reach 2^24, so 256 v does not fit:
// there V = float(v_0) * 256 + float(v_1) in fp32 (one rounding) takes float(v)'s place.
// Every lane is one channel and every step is the same for each row, so a row's bits do not
// depend on how many rows a call has, where the row sits, or the thread count.
//
// Packed layout (ggml.py pack()): panels of 32 output channels (N padded to 32 with zero
// blocks); a panel is one contiguous stream of K/256 superblocks of 8 records, one per 32-block,
// each superblock led by a header (K-quants only; gguf_layout below):
//   header: Q4_K d[32] fp16 | dmin[32] fp16;  Q6_K d[32] fp16
//   record: d[32] fp16 (Q4_0, Q5_0, Q8_0) | d[32] m[32] fp16 (Q4_1) | sc[32] mn[32] u8 (Q4_K) |
//           sc_a[32] sc_b[32] s8 (Q6_K), then 8 steps of 4 features x 32 channels
// A step unpacks to 128 bytes U[4 * c + f] (channel c, feature f), the W8A8 layout. Q8_0 stores
// U as s8 (128 bytes); Q4 stores 64 bytes B[i] = U[i] | U[64 + i] << 4, so one 64-byte load gives
// channels 0-15 (low nibbles) and 16-31 (high), and two 32-byte loads give 0-7, 8-15 | 16-23, 24-31.
// Q5_0 adds 16 bytes per step after the nibbles: bit i = bit 4 of U[i]; Q6_K keeps its 8 steps of
// nibbles, then 8 x 32 bytes of high bits: bits 2j, 2j + 1 of byte i = bits 4, 5 of U[32 j + i].
// Q6_K's verify copy (kQ6_KU, ggml.py pack(verify_copy=True); its header and scales as Q6_K's) stores
// U itself, 128 bytes a step: a tile of several rows then spends no instructions on unpacking,
// and AVX2 sums two steps' products in int16 (2 x 2 x 63 x 127 < 2^15) before widening them.
// It is 1.07 bytes per weight beside the packed 0.82: verify calls of kGgufCopyRows sub-rows or
// more read it (where the variant has its loop), one-row decoding keeps the packed stream.
namespace isa {

// One 32-block of v -> q (s8), its sum, the sum of its first half, and the returned scale dx.
// With q1 (two passes), the rounding residual v - q * dx on the tied scale dx / 256 -> q1, its
// sums (gguf.h's top; ggml.py quantize_residual, op for op).
inline float gguf_quantize_block(const float* v, int8_t* q, int32_t* sum, int32_t* half, int8_t* q1, int32_t* sum1,
                                 int32_t* half1) {
  const F16 x0 = load(v), x1 = load(v + 16);
  const float a = reduce_max(max(abs(x0), abs(x1)));  // max is exact in any order
  const float inv = a > 0.f ? (1.f / a) * 127.f : 0.f;
  const I16 i0 = to_int(mul(x0, set1(inv))), i1 = to_int(mul(x1, set1(inv)));  // half to even, as torch.round
  store_bytes(reinterpret_cast<uint8_t*>(q), i0, 16);
  store_bytes(reinterpret_cast<uint8_t*>(q) + 16, i1, 16);
  *half = reduce_add(i0);  // integer sums: exact in any order
  *sum = *half + reduce_add(i1);
  const float scale = a * static_cast<float>(1.0 / 127.0);
  if (q1) {
    const F16 s = set1(scale), inv1 = set1(inv * 256.f);  // exact: a power of two
    const I16 j0 = clamp(to_int(mul(sub(x0, mul(to_float(i0), s)), inv1)), -127, 127);
    const I16 j1 = clamp(to_int(mul(sub(x1, mul(to_float(i1), s)), inv1)), -127, 127);
    store_bytes(reinterpret_cast<uint8_t*>(q1), j0, 16);
    store_bytes(reinterpret_cast<uint8_t*>(q1) + 16, j1, 16);
    *half1 = reduce_add(j0);
    *sum1 = *half1 + reduce_add(j1);
  }
  return scale;
}

// Row m of x (K a multiple of 32) -> P sub-rows m * P + p of xq [.][K] s8, dx and xs [.][K / 32]:
// pass 0 quantises x, pass 1 (P = 2) the residual x - q0 * dx0 on dx1 = dx0 / 256, block by block.
// With `norm` the row is RMS-normalised first, as w8a8.h does it: x * gamma is quantised and
// 1 / rms(x) multiplies each block's scale (block quantisation is invariant to a per-row factor).
// v: K floats of scratch; xh: the blocks' first-half sums.
template <typename T>
void gguf_quantize_rows(const T* x, int64_t ldx, int64_t M, int64_t K, int P, const float* norm, float eps,
                        float* v, int8_t* xq, float* dx, int32_t* xs, int32_t* xh) {
  const int64_t B = K / 32;
  for (int64_t m = 0; m < M; ++m) {
    F16 ss = zero();
    for (int64_t k = 0; k < K; k += 16) {
      F16 f = loadn(x + m * ldx + k, 16);
      if (norm) {
        ss = add(ss, mul(f, f));
        f = mul(f, load(norm + k));
      }
      store(v + k, f);
    }
    const float r = norm ? 1.f / std::sqrt(hsum(ss) / static_cast<float>(K) + eps) : 1.f;
    const int64_t s = m * P, t = s + P - 1;  // the sub-rows (the same one with P = 1)
    for (int64_t b = 0; b < B; ++b) {
      const float scale = gguf_quantize_block(v + 32 * b, xq + s * K + 32 * b, xs + s * B + b, xh + s * B + b,
                                              P == 2 ? xq + t * K + 32 * b : nullptr, xs + t * B + b, xh + t * B + b);
      dx[s * B + b] = scale * r;
      if (P == 2) dx[t * B + b] = scale * (1.f / 256.f) * r;
    }
  }
}

constexpr int64_t kGgufRowBlock = 64;  // rows per pass over the weights (their float sums in L1)
// Sub-rows from which a row block runs on AMX tiles, per format (fewer: the VNNI tiles are faster
// here; docs/design-notes.md). Q8_0 (the LM head: no unpack on VNNI) stays at 20, where AMX
// stopped being slower; the Q4 / Q5 formats, with tiles of the call's own height (gguf_amx.h),
// run from 16, where they became faster. Q6_K: no AMX loop.
constexpr int64_t kGgufAmxRows[kGgufFormats] = {16, 16, 20, 16, 16, 20};
// Sub-rows from which a call reads Q6_K's verify copy (fewer: the packed stream, whose bytes are
// what two rows wait on; docs/verify-cost-breakdown.md)
constexpr int64_t kGgufCopyRows = 4;
constexpr int64_t kGgufChunk = 16;     // blocks of a panel (<= 17 KB; whole superblocks) every row tile runs while in L1

// One gguf_linear call's operands: M sub-rows x (P per output row; K = 32 * x.B features), the
// weights w of format fmt (panels of 32 of the N output channels), bias (or nullptr), y [M / P, N].
struct GgufLinear {
  int fmt, P;
  int64_t M, N;
  GgufRows x;
  const uint8_t* w;
  const float* bias;
  float* y;
};

// Panels [p0, p1) for sub-rows [0, M) (P per output row; kGgufRowBlock is even): one thread's
// contiguous share of the weights. A single row tile walks each panel once; with more, each
// chunk of blocks is run by every tile while it sits in L1, so the weights leave DRAM once per
// call. A variant with a wide loop (AMX tiles: gguf_amx.h; AVX2: gguf_wide.h) runs row blocks
// of its min_rows[P - 1][fmt] sub-rows or more on it instead (where it has the format). xm: the float
// step's row term dx * float(xs) (with P = 2: dx1 * float(256 xs_0 + xs_1) at the row's second
// sub-row), once per call. Each row's float sums land at its first sub-row's place in acc:
// 32 * min(M, kGgufRowBlock) floats.
inline void gguf_panels(const GgufLoop& loop, const GgufLinear& c, int64_t p0, int64_t p1, float* acc) {
  const int fmt = c.fmt, P = c.P;
  const int64_t M = c.M, N = c.N, B = c.x.B, pb = gguf_panel_bytes(fmt, B), R = loop.rows[P - 1][fmt];
  const bool wide = fmt < kGgufFormats && loop.wide && M >= loop.wide->min_rows[P - 1][fmt] &&
                    loop.wide->fn[P - 1][fmt];  // the wide loops have no verify copy format
  const GgufWide* w = wide ? loop.wide : nullptr;
  if (w && w->begin) w->begin();
  for (int64_t r0 = 0; r0 < M; r0 += kGgufRowBlock) {
    const int64_t r1 = std::min(r0 + kGgufRowBlock, M);
    // several tiles: chunks of at most kGgufChunk blocks, as even as whole superblocks allow (the
    // prefetch below fetches as many bytes as the chunk has, for the next one)
    const int64_t T = (r1 - r0 + R - 1) / R, nc = (B + kGgufChunk - 1) / kGgufChunk, g = gguf_superblocks(fmt) ? 8 : 1;
    const int64_t chunk = T == 1 ? B : (B + g * nc - 1) / (g * nc) * g;
    for (int64_t p = p0; p < p1; ++p) {
      const uint8_t* panel = c.w + p * pb;
      std::memset(acc, 0, sizeof(float) * 32 * (r1 - r0));
      if (w && r1 - r0 >= w->min_rows[P - 1][fmt]) {  // the same bits as the tiles below
        w->fn[P - 1][fmt]({panel, c.x.from(r0), r1 - r0, acc});
      } else {
        for (int64_t b0 = 0; b0 < B; b0 += chunk) {
          const int64_t b1 = std::min(b0 + chunk, B), at = gguf_panel_bytes(fmt, b0);
          const int64_t bytes = gguf_panel_bytes(fmt, b1) - at;
          // The weight stream runs on into the next panel. One tile fetches kPrefetch bytes ahead
          // of its blocks (one row: kGgufPrefetch); several fetch the bytes after the chunk, a share
          // in each tile, so that the stream flows while every tile runs (not only the first: 1/T of the time)
          const int64_t lines = T == 1 ? (bytes / (b1 - b0) + 63) / 64 : (bytes / 64 + T * (b1 - b0) - 1) / (T * (b1 - b0));
          for (int64_t r = r0, t = 0; r < r1; r += R, ++t) {
            const uint8_t* pf = T == 1 ? panel + at + (r1 - r0 == P ? kGgufPrefetch : kPrefetch) : panel + at + bytes + t * (b1 - b0) * lines * 64;
            loop.fn[P - 1][fmt][std::min(R, r1 - r)]({panel, b0, b1, c.x.from(r), acc + (r - r0) * 32, pf, lines});
          }
        }
      }
      for (int h = 0; h < 2; ++h) {
        const int64_t n = p * 32 + 16 * h;
        if (n >= N) break;
        const F16 bv = c.bias ? loadn(c.bias + n, N - n) : zero();
        for (int64_t r = r0; r < r1; r += P) {  // y = the row's sums (+ bias)
          F16 v = load(acc + (r - r0) * 32 + 16 * h);
          if (c.bias) v = add(v, bv);
          storen(c.y + r / P * N + n, v, N - n);
        }
      }
    }
  }
  if (w && w->end) w->end();
}

}  // namespace isa
