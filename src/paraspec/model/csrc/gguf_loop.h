// The GGUF inner loop, one source for every variant: isa_avx512.h and isa_avx2.h include it
// inside a namespace that defines the variant's `GOp` (how a step's weights are unpacked and
// multiplied, and its float vectors), each inside its own target region. No include guard:
// included repeatedly. Re-included rather than a template over GOp: GCC compiles a template
// with the target options in force where it is defined, not where it is instantiated.
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

// a[i][j] += sub-row i's products of steps [K0, K1) with the block's weights wq (channels L * j
// on in a[.][j]); x: sub-row i's step k at xb[i * ldx + k]
template <int R, int FMT, int K0, int K1>
inline void gsteps(const uint8_t* wq, const int32_t* xb, int64_t ldx, typename GOp::Acc (&a)[R][GOp::kVecs]) {
  using A = typename GOp::Acc;
  constexpr bool Q8 = FMT == 2, Q5 = FMT == 3, U6 = FMT == 6, Q6 = FMT == 5 || U6;
  constexpr int V = GOp::kVecs;
  constexpr bool P16 = GOp::kPairs16 && !Q8 && !Q5 && !Q6;
  if constexpr (U6 && GOp::kPairs16) {
    // Q6_K's verify copy (gguf.h): each step's bytes U as they are; two steps' vpmaddubsw pairs
    // (u8 <= 63 by s8: 2 x 2 x 63 x 127 < 2^15) added in int16, then widened once
#pragma GCC unroll 4
    for (int k = K0; k < K1; k += 2) {
      A x0[R], x1[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) x0[i] = GOp::prep4(xb[i * ldx + k]), x1[i] = GOp::prep4(xb[i * ldx + k + 1]);
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) {
        const A w = gbytes<U6>(wq + 128 * k + 128 / V * j), v = gbytes<U6>(wq + 128 * (k + 1) + 128 / V * j);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) a[i][j] = gpair<U6>(a[i][j], w, x0[i], v, x1[i]);
      }
    }
  } else {
#pragma GCC unroll 8
    for (int k = K0; k < K1; ++k) {
      A w[4];  // the step's weights in channel order, L channels each
      if constexpr (Q8) GOp::load_q8(wq + 128 * k, w[0], w[1], w[2], w[3]);
      else if constexpr (Q5) GOp::load_q5(wq + 80 * k, w[0], w[1], w[2], w[3]);
      else if constexpr (Q6) GOp::load_q6(wq + 64 * k, wq + 512 + 32 * k, w[0], w[1], w[2], w[3]);
      else GOp::load_q4(wq + 64 * k, w[0], w[1], w[2], w[3]);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const auto x = gprep<Q8>(xb[i * ldx + k]);
#pragma GCC unroll 4
        for (int j = 0; j < V; ++j) a[i][j] = gmac<Q8, P16>(a[i][j], x, w[j]);
      }
    }
  }
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
  F f[R][V];  // the rows' float sums (P = 2: at each row's first sub-row)
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) f[i][j] = i % P == 0 ? GOp::load_f(acc + 32 * i + L * j) : GOp::zero_f();
  for (int64_t b = b0; b < b1; ++b) {
    const uint8_t* hdr = panel + (b >> 3) * SUPER;  // the superblock's header (K-quants)
    const uint8_t* blk = hdr + HDR + (b & 7) * REC;
    for (int64_t o = 0; o < lines; ++o)
      _mm_prefetch(reinterpret_cast<const char*>(pf) + ((b - b0) * lines + o) * 64, _MM_HINT_T0);
    const uint8_t* wq = blk + SB;
    const int32_t* xb = xw + 8 * b;
    ldx = opaque(ldx);  // else GCC keeps a pointer per (row, step) across blocks, on the stack
    // the sums start at -C * xs (exact integers): the excess is gone before the float step
    A a[R][V];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j)
        a[i][j] = C != 0 && !P16 ? GOp::set1_i(-C * xs[i * B + b]) : Q6 ? GOp::set1_i(-32 * xh[i * B + b]) : GOp::zero_acc();
    if constexpr (Q6) {
      // first half (steps 0-3, sub-block a, sums from -32 xh): h = (isum_a - 32 xh) * sc_a, exact
      gsteps<R, FMT, 0, 4>(wq, xb, ldx, a);
      A h[R][V];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < V; ++j) {
          h[i][j] = GOp::mullo(a[i][j], GOp::s8x(blk + L * j));
          a[i][j] = GOp::set1_i(-32 * (xs[i * B + b] - xh[i * B + b]));
        }
      gsteps<R, FMT, 4, 8>(wq, xb, ldx, a);
      // second half from -32 (xs - xh): v = h + (isum_b - 32 (xs - xh)) * sc_b
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < V; ++j) a[i][j] = GOp::add_i(h[i][j], GOp::mullo(a[i][j], GOp::s8x(blk + 32 + L * j)));
    } else {
      gsteps<R, FMT, 0, 8>(wq, xb, ldx, a);
    }
    if constexpr (P16) {  // the int16 sums widened, from -C * xs (exact)
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < V; ++j) a[i][j] = gwiden<P16>(-C * xs[i * B + b], a[i][j]);
    }
    // gguf.h's float step for each format; f += t. The block's channel scales first (shared by
    // the rows): d (fp16), Q4_1's m, Q4_K's d * sc and dmin * mn (exact), Q6_K's superblock d.
    const uint16_t* d = reinterpret_cast<const uint16_t*>(Q4K || Q6 ? hdr : blk);
    F ds[V], dm[V];
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) {
      ds[j] = GOp::half(d + L * j), dm[j] = GOp::zero_f();
      if constexpr (Q41) dm[j] = GOp::half(d + 32 + L * j);
      if constexpr (Q4K) {
        ds[j] = GOp::mul_f(ds[j], GOp::to_float(GOp::u8x(blk + L * j)));
        dm[j] = GOp::mul_f(GOp::half(d + 32 + L * j), GOp::to_float(GOp::u8x(blk + 32 + L * j)));
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i += P) {
      const int64_t e = (i + P - 1) * B + b;  // the row's last sub-row
      const F sx = GOp::set1_f(dx[e]);
      const F sm = GOp::set1_f(Q41 || Q4K ? xm[e] : 0.f);
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) {
        // the row's integers as one float (gguf.h: P = 2 combines sub-rows i, i + 1)
        F v;
        if constexpr (P == 1) v = GOp::to_float(a[i][j]);
        else if constexpr (Q6) v = GOp::add_f(GOp::mul_f(GOp::to_float(a[i][j]), GOp::set1_f(256.f)), GOp::to_float(a[i + 1][j]));
        else v = GOp::to_float(GOp::add_i(GOp::shl8(a[i][j]), a[i + 1][j]));
        F s = GOp::mul_f(v, GOp::mul_f(ds[j], sx));
        if constexpr (Q41) s = GOp::add_f(s, GOp::mul_f(dm[j], sm));
        if constexpr (Q4K) s = GOp::sub_f(s, GOp::mul_f(dm[j], sm));
        f[i][j] = GOp::add_f(f[i][j], s);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; i += P)
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) GOp::store_f(acc + 32 * i + L * j, f[i][j]);
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
// the table of tiles: per pass count P - 1, format F and sub-row count N (0: none)
template <int N, int F, int P>
constexpr GgufFn gentry() {
  if constexpr (N == 0) return nullptr;
  else return gtile_fn<N, F, P>();
}
template <int P, int F, int... N>
constexpr void gfill(GgufLoop& l, std::integer_sequence<int, N...>) {
  l.rows[P - 1][F] = grows(P, F);
  ((l.fn[P - 1][F][N] = gentry<N, F, P>()), ...);
}
template <int P, int... F>
constexpr void gfill_pass(GgufLoop& l, std::integer_sequence<int, F...>) {
  (gfill<P, F>(l, std::make_integer_sequence<int, 9>{}), ...);
}
constexpr GgufLoop kGgufLoop = [] {
  GgufLoop l{};
  gfill_pass<1>(l, std::make_integer_sequence<int, kGgufLoopFormats>{});
  gfill_pass<2>(l, std::make_integer_sequence<int, kGgufLoopFormats>{});
  return l;
}();
