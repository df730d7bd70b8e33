// The GGUF loop for calls with several sub-rows (a verify step) on the AVX2 variants: isa_avx2.h
// includes it after gguf_loop.h inside each namespace (avx2, avxvnni), over that variant's GOp.
// No include guard: included repeatedly.
//
// gguf_loop.h unpacks every step's 4-bit weights again for each tile of kRows (2) sub-rows, and
// its 8 integer and 8 float accumulators already fill AVX2's 16 registers. Here a chunk of a
// panel's blocks is unpacked once to bytes (GOp::load_*, so the same values) in an L1 buffer,
// with the blocks' channel scales; then tiles of WR sub-rows x 16 channels run over it: 2 * WR
// integer accumulators, the float sums in acc (L1). On "avx2" the Q4 / Q5 / Q6 products are
// summed in int16 over as many steps as cannot overflow (vpmaddubsw pairs of u8 <= 15 by s8:
// 8 steps of 2 * 15 * 128 < 2^15; <= 31: 4 steps; <= 63: 2 steps), one vpmaddwd per group.
// The block sums are the same exact integers as gguf_loop.h's, and the float step below is
// its op sequence, per lane, so every row's bits equal the 1-row loop's, whatever the row
// count or place (kernels.cpp runs a call on either loop). With P = 2 a tile holds whole rows
// (WR even) and combines each row's two sub-rows before its one float step (gguf.h).

// sub-rows per wide tile: 2 * WR accumulators (two per (row, channel half) where int16 groups
// or Q6_K's halves need a second), 2 weights and the activation forms in 16 registers; P = 2:
// an even count (whole rows)
template <int FMT, int P>
constexpr int wide_rows() {
  constexpr bool Q5 = FMT == kQ5_0, Q6 = FMT == kQ6_K, Q8 = FMT == kQ8_0;
  constexpr int r = GOp::kPairs16 ? (Q8 ? 4 : Q5 ? 3 : Q6 ? 2 : 4) : (Q6 ? 3 : 6);
  return P == 2 ? r & ~1 : r;
}

constexpr int64_t kWideChunk = 16;  // blocks unpacked at a time: 16 KB of bytes, in L1 with the rows' activations

// Blocks [b0, b1) of a panel -> wu [block][step][128 bytes U] (gguf_loop.h's w0-w3 in order:
// channels 0-7, 8-15, 16-23, 24-31) and sc [block][ds 0-31, dm 0-31] (gguf_loop.h's scales).
template <int FMT>
void wide_unpack(const uint8_t* panel, int64_t b0, int64_t b1, uint8_t* wu, float* sc) {
  using A = typename GOp::Acc;
  constexpr bool Q8 = FMT == kQ8_0, Q41 = FMT == kQ4_1, Q5 = FMT == kQ5_0, Q4K = FMT == kQ4_K, Q6 = FMT == kQ6_K;
  constexpr GgufLayout LAY = gguf_layout(FMT);
  constexpr int64_t SB = LAY.scales, REC = LAY.record, HDR = LAY.header, SUPER = HDR + 8 * REC;
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* hdr = panel + (b >> 3) * SUPER;
    const uint8_t* blk = hdr + HDR + (b & 7) * REC;
    for (int64_t o = 0; o < REC; o += 64)  // the weights stream on: fetch ahead, as gguf_loop.h
      _mm_prefetch(reinterpret_cast<const char*>(blk) + o + kPrefetch, _MM_HINT_T0);
    const uint8_t* wq = blk + SB;
    uint8_t* out = wu + (b - b0) * 1024;
    for (int k = 0; k < 8; ++k) {
      A w0, w1, w2, w3;
      if constexpr (Q8) GOp::load_q8(wq + 128 * k, w0, w1, w2, w3);
      else if constexpr (Q5) GOp::load_q5(wq + 80 * k, w0, w1, w2, w3);
      else if constexpr (Q6) GOp::load_q6(wq + 64 * k, wq + 512 + 32 * k, w0, w1, w2, w3);
      else GOp::load_q4(wq + 64 * k, w0, w1, w2, w3);
      GOp::store_b(out + 128 * k, w0), GOp::store_b(out + 128 * k + 32, w1);
      GOp::store_b(out + 128 * k + 64, w2), GOp::store_b(out + 128 * k + 96, w3);
    }
    const uint16_t* d = reinterpret_cast<const uint16_t*>(Q4K || Q6 ? hdr : blk);
    float* s = sc + (b - b0) * 64;
    for (int j = 0; j < 4; ++j) {
      typename GOp::Flt ds = GOp::half(d + 8 * j), dm = GOp::zero_f();
      if constexpr (Q41) dm = GOp::half(d + 32 + 8 * j);
      if constexpr (Q4K) {
        ds = GOp::mul_f(ds, GOp::to_float(GOp::u8x(blk + 8 * j)));
        dm = GOp::mul_f(GOp::half(d + 32 + 8 * j), GOp::to_float(GOp::u8x(blk + 32 + 8 * j)));
      }
      GOp::store_f(s + 8 * j, ds), GOp::store_f(s + 32 + 8 * j, dm);
    }
  }
}

// a[i][j] += the products of steps [k0, k1) for R rows (x: row i's step k at x[i * K4 + k]) and
// the 16 channels of w (step k's two vectors at w + 128 * k)
template <int R, int FMT, int K0, int K1>
inline void wide_sums(const uint8_t* w, const int32_t* x, int64_t K4, typename GOp::Acc (&a)[R][2]) {
  using A = typename GOp::Acc;
  constexpr bool Q8 = FMT == kQ8_0, Q5 = FMT == kQ5_0, Q6 = FMT == kQ6_K;
  if constexpr (GOp::kPairs16 && !Q8) {
    constexpr int G = Q5 ? 4 : Q6 ? 2 : 8;  // steps an int16 lane holds (see the top)
    static_assert((K1 - K0) % G == 0, "whole groups");
#pragma GCC unroll 8
    for (int g = K0; g < K1; g += G) {
      A p[R][2];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) p[i][0] = p[i][1] = GOp::zero_acc();
#pragma GCC unroll 8
      for (int s = 0; s < G; ++s) {
        const A w0 = GOp::load_b(w + 128 * (g + s)), w1 = GOp::load_b(w + 128 * (g + s) + 32);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const A xi = GOp::prep4(x[i * K4 + g + s]);
          p[i][0] = gmac<false, true>(p[i][0], xi, w0);
          p[i][1] = gmac<false, true>(p[i][1], xi, w1);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
        a[i][0] = GOp::add_i(a[i][0], GOp::widen16(p[i][0])), a[i][1] = GOp::add_i(a[i][1], GOp::widen16(p[i][1]));
    }
  } else {
#pragma GCC unroll 8
    for (int k = K0; k < K1; ++k) {
      const A w0 = GOp::load_b(w + 128 * k), w1 = GOp::load_b(w + 128 * k + 32);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const auto xi = gprep<Q8>(x[i * K4 + k]);
        a[i][0] = opaque(gmac<Q8>(a[i][0], xi, w0));
        a[i][1] = opaque(gmac<Q8>(a[i][1], xi, w1));
      }
    }
  }
}

// R rows x channels 16h..16h+15 over blocks [t.b0, t.b1) (unpacked at wu, sc from b0): the exact
// block sums, then gguf_loop.h's float step, f += t, with f at acc[32 * i + 16h + ...] (P = 2:
// per row, at its first sub-row i, after the two sub-rows combine as gguf.h says). t.pf: unused
// (wide_unpack fetches ahead).
template <int R, int FMT, int P>
void wide_tile(const GgufTile& t, const uint8_t* wu, const float* sc, int h) {
  const uint8_t* const panel = t.panel;
  const int64_t b0 = t.b0, b1 = t.b1, B = t.x.B;
  int64_t K4 = t.x.K4;
  const int32_t *const xw = t.x.xw, *const xs = t.x.xs, *const xh = t.x.xh;
  const float *const dx = t.x.dx, *const xm = t.x.xm;
  float* const acc = t.acc;
  using A = typename GOp::Acc;
  using F = typename GOp::Flt;
  constexpr bool Q8 = FMT == kQ8_0, Q41 = FMT == kQ4_1, Q5 = FMT == kQ5_0, Q4K = FMT == kQ4_K, Q6 = FMT == kQ6_K;
  constexpr GgufLayout LAY = gguf_layout(FMT);
  constexpr int64_t REC = LAY.record, HDR = LAY.header, SUPER = HDR + 8 * REC;
  constexpr int32_t C = FMT == kQ4_0 ? 8 : Q5 ? 16 : Q8 ? GOp::kQ8Offset : 0;  // the sums' excess per xs
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* w = wu + (b - b0) * 1024 + 64 * h;
    const int32_t* x = xw + 8 * b;
    K4 = opaque(K4);
    A a[R][2];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)  // the sums start at -C * xs (Q6_K: -32 xh), exact, as gguf_loop.h
      a[i][0] = a[i][1] = GOp::set1_i(Q6 ? -32 * xh[i * B + b] : -C * xs[i * B + b]);
    if constexpr (Q6) {
      // h = (isum_a - 32 xh) * sc_a + (isum_b - 32 (xs - xh)) * sc_b, in int32 (exact)
      const uint8_t* blk = panel + (b >> 3) * SUPER + HDR + (b & 7) * REC;
      wide_sums<R, FMT, 0, 4>(w, x, K4, a);
      A v[R][2];
      const A sa0 = GOp::s8x(blk + 16 * h), sa1 = GOp::s8x(blk + 16 * h + 8);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        v[i][0] = GOp::mullo(a[i][0], sa0), v[i][1] = GOp::mullo(a[i][1], sa1);
        a[i][0] = a[i][1] = GOp::set1_i(-32 * (xs[i * B + b] - xh[i * B + b]));
      }
      wide_sums<R, FMT, 4, 8>(w, x, K4, a);
      const A sb0 = GOp::s8x(blk + 32 + 16 * h), sb1 = GOp::s8x(blk + 32 + 16 * h + 8);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
        a[i][0] = GOp::add_i(v[i][0], GOp::mullo(a[i][0], sb0)), a[i][1] = GOp::add_i(v[i][1], GOp::mullo(a[i][1], sb1));
    } else {
      wide_sums<R, FMT, 0, 8>(w, x, K4, a);
    }
    // gguf_loop.h's float step, op for op: t = float(I) * (ds * sx) (+ or - dm * sm); f += t
    const float* s = sc + (b - b0) * 64 + 16 * h;
#pragma GCC unroll 8
    for (int i = 0; i + P - 1 < R; i += P) {
      const int e = i + P - 1;  // the row's last sub-row: its dx, and xm = dx * float(xs) (gguf.h)
      const F sx = GOp::set1_f(dx[e * B + b]);
      const F sm = GOp::set1_f(Q41 || Q4K ? xm[e * B + b] : 0.f);
#pragma GCC unroll 2
      for (int j = 0; j < 2; ++j) {
        F v;
        if constexpr (P == 1) v = GOp::to_float(a[i][j]);
        else if constexpr (Q6) v = GOp::add_f(GOp::mul_f(GOp::to_float(a[i][j]), GOp::set1_f(256.f)), GOp::to_float(a[e][j]));
        else v = GOp::to_float(GOp::add_i(GOp::shl8(a[i][j]), a[e][j]));
        F t = GOp::mul_f(v, GOp::mul_f(GOp::load_f(s + 8 * j), sx));
        if constexpr (Q41) t = GOp::add_f(t, GOp::mul_f(GOp::load_f(s + 32 + 8 * j), sm));
        if constexpr (Q4K) t = GOp::sub_f(t, GOp::mul_f(GOp::load_f(s + 32 + 8 * j), sm));
        float* f = acc + 32 * i + 16 * h + 8 * j;
        GOp::store_f(f, GOp::add_f(GOp::load_f(f), t));
      }
    }
  }
}

// gguf.h's GgufWideFn: every sub-row of a row block over one panel (blocks [0, B)), acc[32 * row
// + channel] added to; the activations from the block's first sub-row.
template <int FMT, int P>
void wide_panel(const GgufPanel& c) {
  constexpr int WR = wide_rows<FMT, P>();
  using Tile = void (*)(const GgufTile&, const uint8_t*, const float*, int);
  constexpr Tile tiles[] = {nullptr, wide_tile<1, FMT, P>, wide_tile<WR < 2 ? WR : 2, FMT, P>,
                            wide_tile<WR < 3 ? WR : 3, FMT, P>, wide_tile<WR < 4 ? WR : 4, FMT, P>,
                            wide_tile<WR < 5 ? WR : 5, FMT, P>, wide_tile<WR, FMT, P>};  // P = 2: even counts only
  alignas(32) uint8_t wu[kWideChunk * 1024];
  alignas(32) float sc[kWideChunk * 64];
  for (int64_t b0 = 0; b0 < c.x.B; b0 += kWideChunk) {
    const int64_t b1 = std::min(b0 + kWideChunk, c.x.B);
    wide_unpack<FMT>(c.panel, b0, b1, wu, sc);
    for (int64_t r = 0; r < c.rows; r += WR) {
      const int64_t n = std::min<int64_t>(WR, c.rows - r);
      const GgufTile t{c.panel, b0, b1, c.x.from(r), c.acc + 32 * r, nullptr, 0};
      for (int h = 0; h < 2; ++h) tiles[n](t, wu, sc, h);
    }
  }
}

// From GOp::wide_min_rows(P) sub-rows (2 are one gguf_loop.h tile, which streams the weights once
// without a buffer), for the formats GOp::wide_formats(P) names: where the wide tiles were not
// faster than gguf_loop.h's here (measured), that loop keeps them.
template <int FMT, int P>
constexpr GgufWideFn wide_fn() {
  return GOp::wide_formats(P) >> FMT & 1 ? wide_panel<FMT, P> : nullptr;
}
template <int P, int... F>
constexpr void wide_fill(GgufWide& w, std::integer_sequence<int, F...>) {
  ((w.min_rows[P - 1][F] = GOp::wide_min_rows(P), w.fn[P - 1][F] = wide_fn<F, P>()), ...);
}
constexpr GgufWide kGgufWide = [] {
  GgufWide w{};
  wide_fill<1>(w, std::make_integer_sequence<int, kGgufFormats>{});
  wide_fill<2>(w, std::make_integer_sequence<int, kGgufFormats>{});
  return w;
}();
constexpr GgufLoop kGgufWideLoop = [] {
  GgufLoop l = kGgufLoop;
  l.wide = &kGgufWide;
  return l;
}();
