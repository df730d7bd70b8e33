// The GGUF inner loop, one source for every variant: isa_avx512.h and isa_avx2.h include it
// inside a namespace that defines the variant's `GOp` (how a step's weights are unpacked and
// multiplied, and its float vectors), each inside its own target region. No include guard:
// included repeatedly.
//
// R rows times one 32-channel panel over blocks [b0, b1): per block, the 8 steps' int32 dot
// products (exact: neither the tile size nor the variant changes them; VNNI Q8_0 sums carry
// GOp::kQ8Offset * xs extra, taken off here), then gguf.h's float step for each row and
// channel, added to the tile's running sums acc[32 * r + channel] (read at the start, written
// at the end). Integer and float accumulators stay in registers across the blocks.

// Q4 and Q8_0 steps may hold activations in different forms (AVX2's Q8_0 needs |x| and x).
template <bool Q8>
inline auto gprep(int32_t x4) {
  if constexpr (Q8) return GOp::prep8(x4);
  else return GOp::prep4(x4);
}
template <bool Q8, typename X>
inline typename GOp::Acc gmac(typename GOp::Acc a, const X& x, typename GOp::Acc w) {
  if constexpr (Q8) return GOp::mac8(a, x, w);
  else return GOp::mac4(a, x, w);
}

template <int R, int FMT>
void panel_tile(const uint8_t* panel, int64_t b0, int64_t b1, const int32_t* xw, int64_t ldx, const float* dx,
                const int32_t* xs, int64_t B, float* acc, bool prefetch) {
  using A = typename GOp::Acc;
  using F = typename GOp::Flt;
  constexpr bool Q8 = FMT == 2, Q41 = FMT == 1;
  constexpr int V = GOp::kVecs, L = 32 / V;  // accumulators per row, channels in each
  constexpr int64_t SB = Q41 ? 128 : 64, REC = SB + (Q8 ? 1024 : 512);  // gguf.h's record
  constexpr int32_t C = FMT == 0 ? 8 : Q8 ? GOp::kQ8Offset : 0;        // the sums' excess per xs
  // Named accumulators (not arrays), as w8a8_loop.h: GCC 12 would copy an array every step.
#define PS_F1(i, j) F f##i##j = (R > i && V > j) ? GOp::load_f(acc + 32 * i + L * j) : GOp::zero_f();
#define PS_F(i) PS_F1(i, 0) PS_F1(i, 1) PS_F1(i, 2) PS_F1(i, 3)
  PS_F(0) PS_F(1) PS_F(2) PS_F(3) PS_F(4) PS_F(5) PS_F(6) PS_F(7)
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* blk = panel + b * REC;
    if (prefetch)  // the stream runs on into the next panel: fetch ahead of the first tile
      for (int64_t o = 0; o < REC; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk) + o + kPrefetch, _MM_HINT_T0);
    const uint8_t* wq = blk + SB;
    const int32_t* xb = xw + 8 * b;
#define PS_ACC1(i, j) A a##i##j = GOp::zero_acc();
#define PS_ACC(i) PS_ACC1(i, 0) PS_ACC1(i, 1) PS_ACC1(i, 2) PS_ACC1(i, 3)
    PS_ACC(0) PS_ACC(1) PS_ACC(2) PS_ACC(3) PS_ACC(4) PS_ACC(5) PS_ACC(6) PS_ACC(7)
#define PS_ROW(i)                                         \
  if constexpr (R > i) {                                  \
    const auto x = gprep<Q8>(xb[i * ldx + k]);            \
    a##i##0 = gmac<Q8>(a##i##0, x, w0);                   \
    a##i##1 = gmac<Q8>(a##i##1, x, w1);                   \
    if constexpr (V > 2) {                                \
      a##i##2 = gmac<Q8>(a##i##2, x, w2);                 \
      a##i##3 = gmac<Q8>(a##i##3, x, w3);                 \
    }                                                     \
  }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      A w0, w1, w2, w3;  // the step's weights in channel order, L channels each
      if constexpr (Q8) GOp::load_q8(wq + 128 * k, w0, w1, w2, w3);
      else GOp::load_q4(wq + 64 * k, w0, w1, w2, w3);
      PS_ROW(0) PS_ROW(1) PS_ROW(2) PS_ROW(3) PS_ROW(4) PS_ROW(5) PS_ROW(6) PS_ROW(7)
    }
    // gguf.h's float step: t = float(isum - C * xs) * (d * dx) [+ m * (dx * float(xs))]; f += t
    const uint16_t* d = reinterpret_cast<const uint16_t*>(blk);
#define PS_EPI1(i, j)                                                                         \
  if constexpr (R > i && V > j) {                                                             \
    F t = GOp::mul_f(GOp::to_float(C ? GOp::sub_i(a##i##j, C * s) : a##i##j),                 \
                     GOp::mul_f(GOp::half(d + L * j), sx));                                   \
    if constexpr (Q41) t = GOp::add_f(t, GOp::mul_f(GOp::half(d + 32 + L * j), sm));          \
    f##i##j = GOp::add_f(f##i##j, t);                                                         \
  }
#define PS_EPI(i)                                                         \
  if constexpr (R > i) {                                                  \
    const int32_t s = xs[i * B + b];                                      \
    const F sx = GOp::set1_f(dx[i * B + b]);                              \
    const F sm = GOp::set1_f(Q41 ? dx[i * B + b] * static_cast<float>(s) : 0.f); \
    PS_EPI1(i, 0) PS_EPI1(i, 1) PS_EPI1(i, 2) PS_EPI1(i, 3)               \
  }
    PS_EPI(0) PS_EPI(1) PS_EPI(2) PS_EPI(3) PS_EPI(4) PS_EPI(5) PS_EPI(6) PS_EPI(7)
  }
#define PS_OUT1(i, j) if constexpr (R > i && V > j) GOp::store_f(acc + 32 * i + L * j, f##i##j);
#define PS_OUT(i) PS_OUT1(i, 0) PS_OUT1(i, 1) PS_OUT1(i, 2) PS_OUT1(i, 3)
  PS_OUT(0) PS_OUT(1) PS_OUT(2) PS_OUT(3) PS_OUT(4) PS_OUT(5) PS_OUT(6) PS_OUT(7)
#undef PS_OUT
#undef PS_OUT1
#undef PS_EPI
#undef PS_EPI1
#undef PS_ROW
#undef PS_ACC
#undef PS_ACC1
#undef PS_F
#undef PS_F1
}

constexpr int gtile(int r) { return r < GOp::kRows ? r : GOp::kRows; }  // never asked for more than kRows

#define PS_TILES(F)                                                                             \
  {nullptr, panel_tile<gtile(1), F>, panel_tile<gtile(2), F>, panel_tile<gtile(3), F>,          \
   panel_tile<gtile(4), F>, panel_tile<gtile(5), F>, panel_tile<gtile(6), F>, panel_tile<gtile(7), F>, \
   panel_tile<gtile(8), F>}
constexpr GgufLoop kGgufLoop = {GOp::kRows, {PS_TILES(0), PS_TILES(1), PS_TILES(2)}};
#undef PS_TILES
