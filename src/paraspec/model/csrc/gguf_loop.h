// The GGUF inner loop, one source for every variant: isa_avx512.h and isa_avx2.h include it
// inside a namespace that defines the variant's `GOp` (how a step's weights are unpacked and
// multiplied, and its float vectors), each inside its own target region. No include guard:
// included repeatedly.
//
// R rows times one 32-channel panel over blocks [b0, b1): per block, the 8 steps' int32 dot
// products (exact: neither the tile size nor the variant changes them; Q4_0 / Q5_0 values and
// VNNI Q8_0 sums carry C * xs extra, the sums' starting value here; Q6_K's two halves are scaled and summed in int32,
// exact), then gguf.h's float step for each row and
// channel, added to the tile's running sums acc[32 * r + channel] (read at the start, written
// at the end). Integer and float accumulators stay in registers across the blocks. P = 2: the
// R sub-rows are R / 2 rows' two passes (R even), combined per block in int32 (Q6_K: in fp32)
// before the one float step of the row, whose sums sit at its first sub-row's place.

// Q4 and Q8_0 steps may hold activations in different forms (AVX2's Q8_0 needs |x| and x).
template <bool Q8>
inline auto gprep(int32_t x4) {
  if constexpr (Q8) return GOp::prep8(x4);
  else return GOp::prep4(x4);
}
// P16 (AVX2's Q4 formats): vpmaddubsw pairs summed in int16 over the block's 8 steps (u8 <= 15
// by s8: 16 products of at most 15 * 128 < 2^15), widened to int32 once after them.
// GCC otherwise rewrites the int16 sums as wide add trees (all products live: spills) and keeps
// a pointer per (row, step) across blocks (gguf_wide.h): a value it must take as computed, at no cost.
template <typename T>
inline T opaque(T v) {
  if constexpr (std::is_integral_v<T>) asm("" : "+r"(v));
  else asm("" : "+x"(v));
  return v;
}
template <bool Q8, bool P16 = false, typename G = GOp, typename X>
inline typename G::Acc gmac(typename G::Acc a, const X& x, typename G::Acc w) {
  if constexpr (P16) return opaque(G::add16(a, G::dot16(w, x)));
  else if constexpr (Q8) return G::mac8(a, x, w);
  else return G::mac4(a, x, w);
}
template <bool P16, typename G = GOp>
inline typename G::Acc gwiden(int32_t c, typename G::Acc a) {  // c + the int16 sums (P16) in int32
  if constexpr (P16) return G::add_i(G::set1_i(c), G::widen16(a));
  else return a;
}

// a step's weights stored as bytes (the helpers take GOp as a parameter: only AVX2's GOp has these)
template <bool U6, typename G = GOp>
inline typename G::Acc gbytes(const uint8_t* p) {
  return G::load_w(reinterpret_cast<const int8_t*>(p));
}
// a + two steps' products w * x + v * y, summed in int16 and widened (P16 formats' types)
template <bool P16, typename G = GOp>
inline typename G::Acc gpair(typename G::Acc a, typename G::Acc w, typename G::Acc x, typename G::Acc v,
                             typename G::Acc y) {
  return G::add_i(a, G::widen16(G::add16(G::dot16(w, x), G::dot16(v, y))));
}

// xm: gguf.h's dx * float(xs) per (sub-row, block), the Q4_1 / Q4_K row term, computed once per
// call. pf: the weight stream's bytes to fetch while this tile runs, `lines` cache lines per block.
template <int R, int FMT, int P>
void panel_tile(const GgufTile& t) {
  // the fields as locals: the loop below keeps them in registers, not behind the reference
  const uint8_t* const panel = t.panel;
  const int64_t b0 = t.b0, b1 = t.b1, B = t.x.B, lines = t.lines;
  int64_t ldx = t.x.K4;
  const int32_t *const xw = t.x.xw, *const xs = t.x.xs, *const xh = t.x.xh;
  const float *const dx = t.x.dx, *const xm = t.x.xm;
  float* const acc = t.acc;
  const uint8_t* const pf = t.pf;
  using A = typename GOp::Acc;
  using F = typename GOp::Flt;
  constexpr bool Q8 = FMT == 2, Q41 = FMT == 1, Q5 = FMT == 3, Q4K = FMT == 4;
  constexpr bool U6 = FMT == 6, Q6 = FMT == 5 || U6;  // U6: Q6_K's verify copy
  constexpr int V = GOp::kVecs, L = 32 / V;  // accumulators per row, channels in each
  constexpr GgufLayout LAY = gguf_layout(FMT);
  constexpr int64_t SB = LAY.scales, REC = LAY.record, HDR = LAY.header, SUPER = HDR + 8 * REC;
  constexpr int32_t C = FMT == 0 ? 8 : Q5 ? 16 : Q8 ? GOp::kQ8Offset : 0;  // the sums' excess per xs
  constexpr bool P16 = GOp::kPairs16 && !Q8 && !Q5 && !Q6;  // int16 sums (gmac), from zero
  static_assert(!U6 || (GOp::kPairs16 && P == 1), "Q6_K's verify copy: AVX2's one-pass loop (gtile_fn)");
  // Named accumulators (not arrays), as w8a8_loop.h: GCC 12 would copy an array every step.
#define PS_F1(i, j) F f##i##j = (R > i && V > j && i % P == 0) ? GOp::load_f(acc + 32 * i + L * j) : GOp::zero_f();
#define PS_F(i) PS_F1(i, 0) PS_F1(i, 1) PS_F1(i, 2) PS_F1(i, 3)
  PS_F(0) PS_F(1) PS_F(2) PS_F(3) PS_F(4) PS_F(5) PS_F(6) PS_F(7)
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* hdr = panel + (b >> 3) * SUPER;  // the superblock's header (K-quants)
    const uint8_t* blk = hdr + HDR + (b & 7) * REC;
    for (int64_t o = 0; o < lines; ++o)
      _mm_prefetch(reinterpret_cast<const char*>(pf) + ((b - b0) * lines + o) * 64, _MM_HINT_T0);
    const uint8_t* wq = blk + SB;
    const int32_t* xb = xw + 8 * b;
    ldx = opaque(ldx);  // else GCC keeps a pointer per (row, step) across blocks, on the stack
    // the sums start at -C * xs (exact integers): the excess is gone before the float step
#define PS_ACC1(i, j)                                                                 \
  A a##i##j = (C != 0 && R > i && !P16) ? GOp::set1_i(-C * xs[i * B + b])            \
              : (Q6 && R > i)   ? GOp::set1_i(-32 * xh[i * B + b]) : GOp::zero_acc();
#define PS_ACC(i) PS_ACC1(i, 0) PS_ACC1(i, 1) PS_ACC1(i, 2) PS_ACC1(i, 3)
    PS_ACC(0) PS_ACC(1) PS_ACC(2) PS_ACC(3) PS_ACC(4) PS_ACC(5) PS_ACC(6) PS_ACC(7)
#define PS_ROW(i)                                         \
  if constexpr (R > i) {                                  \
    const auto x = gprep<Q8>(xb[i * ldx + k]);            \
    a##i##0 = gmac<Q8, P16>(a##i##0, x, w0);              \
    a##i##1 = gmac<Q8, P16>(a##i##1, x, w1);              \
    if constexpr (V > 2) {                                \
      a##i##2 = gmac<Q8, P16>(a##i##2, x, w2);            \
      a##i##3 = gmac<Q8, P16>(a##i##3, x, w3);            \
    }                                                     \
  }
#define PS_STEPS(k0, k1)                                                       \
  _Pragma("GCC unroll 8") for (int k = k0; k < k1; ++k) {                      \
    A w0, w1, w2, w3; /* the step's weights in channel order, L channels each */ \
    if constexpr (Q8) GOp::load_q8(wq + 128 * k, w0, w1, w2, w3);              \
    else if constexpr (Q5) GOp::load_q5(wq + 80 * k, w0, w1, w2, w3);          \
    else if constexpr (Q6) GOp::load_q6(wq + 64 * k, wq + 512 + 32 * k, w0, w1, w2, w3); \
    else GOp::load_q4(wq + 64 * k, w0, w1, w2, w3);                            \
    PS_ROW(0) PS_ROW(1) PS_ROW(2) PS_ROW(3) PS_ROW(4) PS_ROW(5) PS_ROW(6) PS_ROW(7) \
  }
// Q6_K's verify copy (gguf.h): each step's bytes U as they are; with kPairs16 two steps'
// vpmaddubsw pairs (u8 <= 63 by s8: 2 x 2 x 63 x 127 < 2^15) added in int16, then widened once
#define PS_PX(i)                                                           \
  const A x##i##0 = R > i ? GOp::prep4(xb[i * ldx + k]) : GOp::zero_acc(), \
          x##i##1 = R > i ? GOp::prep4(xb[i * ldx + k + 1]) : GOp::zero_acc();
#define PS_PROW(i, j)                                                                                  \
  if constexpr (R > i) {                                                                               \
    a##i##j = gpair<U6>(a##i##j, w##j, x##i##0, v##j, x##i##1);                                        \
  }
#define PS_PJ(j)                                                                                       \
  if constexpr (V > j) {                                                                               \
    const A w##j = gbytes<U6>(wq + 128 * k + 128 / V * j);                                           \
    const A v##j = gbytes<U6>(wq + 128 * (k + 1) + 128 / V * j);                                     \
    PS_PROW(0, j) PS_PROW(1, j) PS_PROW(2, j) PS_PROW(3, j) PS_PROW(4, j) PS_PROW(5, j) PS_PROW(6, j) \
    PS_PROW(7, j)                                                                                      \
  }
#define PS_HALF(k0, k1)                                                       \
  if constexpr (U6 && GOp::kPairs16) {                                        \
    _Pragma("GCC unroll 4") for (int k = k0; k < k1; k += 2) {                \
      PS_PX(0) PS_PX(1) PS_PX(2) PS_PX(3) PS_PX(4) PS_PX(5) PS_PX(6) PS_PX(7) \
      PS_PJ(0) PS_PJ(1) PS_PJ(2) PS_PJ(3)                                     \
    }                                                                         \
  } else {                                                                    \
    PS_STEPS(k0, k1)                                                          \
  }
    if constexpr (Q6) {
      // first half (steps 0-3, sub-block a, sums from -32 xh): h = (isum_a - 32 xh) * sc_a, exact
      PS_HALF(0, 4)
#define PS_H1(i, j)                                                                              \
  A h##i##j = GOp::zero_acc();                                                                   \
  if constexpr (R > i && V > j) {                                                                \
    h##i##j = GOp::mullo(a##i##j, GOp::s8x(blk + L * j));                                        \
    a##i##j = GOp::set1_i(-32 * (xs[i * B + b] - xh[i * B + b]));                                \
  }
#define PS_H(i) PS_H1(i, 0) PS_H1(i, 1) PS_H1(i, 2) PS_H1(i, 3)
      PS_H(0) PS_H(1) PS_H(2) PS_H(3) PS_H(4) PS_H(5) PS_H(6) PS_H(7)
      PS_HALF(4, 8)
      // second half from -32 (xs - xh): v = h + (isum_b - 32 (xs - xh)) * sc_b
#define PS_V1(i, j)                                                                              \
  if constexpr (R > i && V > j)                                                                  \
    a##i##j = GOp::add_i(h##i##j, GOp::mullo(a##i##j, GOp::s8x(blk + 32 + L * j)));
#define PS_V(i) PS_V1(i, 0) PS_V1(i, 1) PS_V1(i, 2) PS_V1(i, 3)
      PS_V(0) PS_V(1) PS_V(2) PS_V(3) PS_V(4) PS_V(5) PS_V(6) PS_V(7)
#undef PS_V
#undef PS_V1
#undef PS_H
#undef PS_H1
    } else {
      PS_STEPS(0, 8)
    }
    if constexpr (P16) {  // the int16 sums widened, from -C * xs (exact)
#define PS_W1(i, j) \
  if constexpr (R > i && V > j) a##i##j = gwiden<P16>(-C * xs[i * B + b], a##i##j);
#define PS_W(i) PS_W1(i, 0) PS_W1(i, 1) PS_W1(i, 2) PS_W1(i, 3)
      PS_W(0) PS_W(1) PS_W(2) PS_W(3) PS_W(4) PS_W(5) PS_W(6) PS_W(7)
#undef PS_W
#undef PS_W1
    }
    // gguf.h's float step for each format; f += t. The block's channel scales first (shared by
    // the rows): d (fp16), Q4_1's m, Q4_K's d * sc and dmin * mn (exact), Q6_K's superblock d.
    const uint16_t* d = reinterpret_cast<const uint16_t*>(Q4K || Q6 ? hdr : blk);
#define PS_S1(j)                                                                              \
  F ds##j = GOp::zero_f(), dm##j = GOp::zero_f();                                             \
  if constexpr (V > j) {                                                                      \
    ds##j = GOp::half(d + L * j);                                                             \
    if constexpr (Q41) dm##j = GOp::half(d + 32 + L * j);                                     \
    if constexpr (Q4K) {                                                                      \
      ds##j = GOp::mul_f(ds##j, GOp::to_float(GOp::u8x(blk + L * j)));                        \
      dm##j = GOp::mul_f(GOp::half(d + 32 + L * j), GOp::to_float(GOp::u8x(blk + 32 + L * j))); \
    }                                                                                         \
  }
    PS_S1(0) PS_S1(1) PS_S1(2) PS_S1(3)
  // the row's integers as one float (gguf.h: P = 2 combines sub-rows i, i1 = i + 1)
#define PS_I(i, i1, j)                                                                        \
  (P == 1 ? GOp::to_float(a##i##j)                                                            \
   : Q6   ? GOp::add_f(GOp::mul_f(GOp::to_float(a##i##j), GOp::set1_f(256.f)), GOp::to_float(a##i1##j)) \
          : GOp::to_float(GOp::add_i(GOp::shl8(a##i##j), a##i1##j)))
#define PS_EPI1(i, i1, j)                                                                     \
  if constexpr (R > i && V > j) {                                                             \
    F t = GOp::mul_f(PS_I(i, i1, j), GOp::mul_f(ds##j, sx));                                   \
    if constexpr (Q41) t = GOp::add_f(t, GOp::mul_f(dm##j, sm));                              \
    if constexpr (Q4K) t = GOp::sub_f(t, GOp::mul_f(dm##j, sm));                              \
    f##i##j = GOp::add_f(f##i##j, t);                                                         \
  }
#define PS_EPI(i, i1)                                                     \
  if constexpr (R > i && i % P == 0) {                                    \
    const int64_t e = (i + P - 1) * B + b; /* the row's last sub-row */   \
    const F sx = GOp::set1_f(dx[e]);                                      \
    const F sm = GOp::set1_f(Q41 || Q4K ? xm[e] : 0.f);                   \
    PS_EPI1(i, i1, 0) PS_EPI1(i, i1, 1) PS_EPI1(i, i1, 2) PS_EPI1(i, i1, 3) \
  }
    PS_EPI(0, 1) PS_EPI(1, 1) PS_EPI(2, 3) PS_EPI(3, 3) PS_EPI(4, 5) PS_EPI(5, 5) PS_EPI(6, 7) PS_EPI(7, 7)
  }
#define PS_OUT1(i, j) if constexpr (R > i && V > j && i % P == 0) GOp::store_f(acc + 32 * i + L * j, f##i##j);
#define PS_OUT(i) PS_OUT1(i, 0) PS_OUT1(i, 1) PS_OUT1(i, 2) PS_OUT1(i, 3)
  PS_OUT(0) PS_OUT(1) PS_OUT(2) PS_OUT(3) PS_OUT(4) PS_OUT(5) PS_OUT(6) PS_OUT(7)
#undef PS_OUT
#undef PS_OUT1
#undef PS_EPI
#undef PS_EPI1
#undef PS_I
#undef PS_S1
#undef PS_HALF
#undef PS_PJ
#undef PS_PROW
#undef PS_PX
#undef PS_STEPS
#undef PS_ROW
#undef PS_ACC
#undef PS_ACC1
#undef PS_F
#undef PS_F1
}

// sub-rows per tile: P = 2 tiles (kRows2, even) hold whole rows, whose float sums take half the
// registers of their sub-rows' (not Q6_K's: its second set of integer sums fills them)
constexpr int grows(int P, int F) { return P == 2 && F != kQ6_K && F != kQ6_KU ? GOp::kRows2 : GOp::kRows; }
constexpr int gtile(int r, int P, int F) { return r < grows(P, F) ? r : grows(P, F); }  // never asked for more

// P = 2: an odd sub-row count is never asked for
template <int N, int F, int P>
constexpr GgufFn gtile_fn() {
  static_assert(GOp::kRows2 % 2 == 0 && GOp::kRows % 2 == 0, "two-pass tiles hold whole rows");
  if constexpr (P == 2 && gtile(N, P, F) % 2 != 0) return nullptr;
  // Q6_K's verify copy: one pass on AVX2's int16 pairs (with two, gguf_wide.h takes those calls)
  else if constexpr (F == kQ6_KU && (P == 2 || !GOp::kPairs16)) return nullptr;
  else return panel_tile<gtile(N, P, F), F, P>;
}
#define PS_TILES(F, P)                                                                            \
  {nullptr, gtile_fn<1, F, P>(), gtile_fn<2, F, P>(), gtile_fn<3, F, P>(), gtile_fn<4, F, P>(),    \
   gtile_fn<5, F, P>(), gtile_fn<6, F, P>(), gtile_fn<7, F, P>(), gtile_fn<8, F, P>()}
#define PS_PASS(P) \
  {PS_TILES(0, P), PS_TILES(1, P), PS_TILES(2, P), PS_TILES(3, P), PS_TILES(4, P), PS_TILES(5, P), PS_TILES(6, P)}
#define PS_ROWS(P) {grows(P, 0), grows(P, 1), grows(P, 2), grows(P, 3), grows(P, 4), grows(P, 5), grows(P, 6)}
constexpr GgufLoop kGgufLoop = {{PS_ROWS(1), PS_ROWS(2)}, {PS_PASS(1), PS_PASS(2)}};
#undef PS_ROWS
#undef PS_PASS
#undef PS_TILES
