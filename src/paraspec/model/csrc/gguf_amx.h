// The GGUF loop on AMX int8 tiles, for calls with many sub-rows (a
// verify step): the AVX-512 module's extra variant "amx", dispatched at run time only where CPUID
// has AMX-TILE and AMX-INT8 and Linux granted the tile state (kernels.cpp, amx_usable()). Its own
// target region, after the module's: no other function is compiled with AMX, so no AMX
// instruction can run on a CPU without it (AMD's AVX-512 CPUs have none).
//
// Per 32-channel panel and group of kSub blocks, the weights are unpacked once to u8 (Q8_0: used as
// stored) in the tile layout, which is the packed step layout: B row k = step k's 4 features of
// 16 channels (64 bytes). Then for every 16 sub-rows and block: A = the rows' 32 activations of
// the block (s8, read in place from xq), C = A x B for channels 0-15 and 16-31 (TDPBSUD: s8 x u8;
// Q8_0 TDPBSSD: s8 x s8), exact int32 block sums, the same integers the VNNI loop makes. The
// float step after it is gguf_loop.h's, op for op, so each row's bits are the same on either
// loop, whatever the row count: kernels.cpp may run any call on either. Q6_K stays on the VNNI
// loop: on tiles (its two 16-wide halves as two products, then its int32 scaling per row) it was
// slower here than VNNI.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c,amx-tile,amx-int8")
namespace isa {
namespace amx {

struct alignas(64) TileConfig {
  uint8_t palette, start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

constexpr int64_t kPass = 32;  // sub-rows per pass over a group (two A tiles)

// tmm0, tmm1 A: sub-rows 0-15, 16-31 x 32 s8; tmm2, tmm3 B: 8 steps x 64 bytes (channels 0-15,
// 16-31); tmm4-7 C: 16 sub-rows x 16 int32 (rows 0-15 x B0, B1, rows 16-31 x B0, B1). A call of
// n <= kPass sub-rows (one pass) gets tiles of its own height: A0, C4, C5 min(n, 16) rows, A1, C6,
// C7 the rest (1 if none: a tile of 0 rows is unconfigured), so that it multiplies and stores only
// its rows. More sub-rows: 16 and 16, every pass.
// Constants in memory: GCC drops stores to a local it sees no read of (ldtilecfg's operand is
// not one).
constexpr TileConfig tile_shape(int n) {
  const auto r0 = static_cast<uint8_t>(n < 16 ? n : 16), r1 = static_cast<uint8_t>(n > 16 ? n - 16 : 1);
  return {1, 0, {}, {32, 32, 64, 64, 64, 64, 64, 64}, {r0, r1, 8, 8, r0, r0, r1, r1}};
}
struct TileShapes {
  TileConfig n[kPass + 1];  // [n]: n sub-rows (n[0] unused)
};
constexpr TileShapes tile_shapes() {
  TileShapes t{};
  for (int n = 0; n <= kPass; ++n) t.n[n] = tile_shape(n < 1 ? kPass : n);
  return t;
}
// static, as tile_rows: each module its own (GCC binds an inline variable process-wide, across modules)
alignas(64) static constexpr TileShapes kTiles = tile_shapes();
static thread_local int64_t tile_rows = 0;  // the shape this thread's tiles have (0: none yet)
// per thread, before its first panel: the first panel loads its shape
inline void begin() { tile_rows = 0; }
inline void end() { _tile_release(); }  // the thread's tile state back to init (cheaper context switches)

// Blocks per group: unpacked at once (4 KB) and their sums out at once (4 x 32 rows x 32 int32,
// 16 KB). Small, so that they, the rows' activations and sums stay in L1: 16 blocks at a time
// ran slower (docs/design-notes.md).
constexpr int64_t kSub = 4;

// 16 sub-rows' exact block sums for both channel halves (B tiles tmm2, tmm3 loaded): A = tmm X
// from x, C = tmm C0, C1, written out as [row][32 channels] at c. A macro: GCC's tile
// intrinsics paste their register numbers into the instruction, so they must be literals.
#define AMX_SUMS16(Q8, X, C0, C1, x, K, c) \
  do {                                     \
    _tile_zero(C0);                        \
    _tile_zero(C1);                        \
    _tile_loadd(X, x, K);                  \
    if constexpr (Q8) {                    \
      _tile_dpbssd(C0, X, 2);              \
      _tile_dpbssd(C1, X, 3);              \
    } else {                               \
      _tile_dpbsud(C0, X, 2);              \
      _tile_dpbsud(C1, X, 3);              \
    }                                      \
    _tile_stored(C0, c, 128);              \
    _tile_stored(C1, (c) + 16, 128);       \
  } while (0)

// gguf_loop.h's panel_tile over blocks [0, B) for `rows` sub-rows (xq, dx, xs, xm from the first;
// xq readable 15 rows past the last: an A tile always loads 16), acc[32 * row + channel] added
// to. xm = dx * float(xs), once per call: the float step's per-row term (Q4_1, Q4_K).
// Per group of kSub blocks (unpacked once, for every pass), the tiles write the blocks' sums
// out, then each row runs its float steps over them with its sums in registers: the float step,
// op for op gguf_loop.h's, is what bounds this loop. P = 2: a row's two sub-rows (never split:
// kPass is even) combine in int32 first, one float step per row (gguf.h), its sums at the first
// sub-row's place.
template <int FMT, int P>
void panel(const GgufPanel& call) {  // (x.xh, Q6_K's, is not read here)
  const uint8_t* const panel = call.panel;
  const int64_t B = call.x.B, K = 4 * call.x.K4, rows = call.rows;
  const int8_t* const xq = reinterpret_cast<const int8_t*>(call.x.xw);
  const int32_t* const xs = call.x.xs;
  const float *const dx = call.x.dx, *const xm = call.x.xm;
  float* const acc = call.acc;
  using G = vnni512::GOp;
  constexpr bool Q8 = FMT == kQ8_0, Q5 = FMT == kQ5_0, Q41 = FMT == kQ4_1, Q4K = FMT == kQ4_K;
  static_assert(FMT != kQ6_K, "Q6_K's 16-wide halves stay on the VNNI loop");
  constexpr GgufLayout LAY = gguf_layout(FMT);
  constexpr int64_t SB = LAY.scales, REC = LAY.record, HDR = LAY.header, SUPER = HDR + 8 * REC;
  constexpr int32_t C = FMT == kQ4_0 ? 8 : Q5 ? 16 : 0;  // the stored values' offset (Q8_0: none, s8 x s8)
  alignas(64) uint8_t wu[kSub * 1024];      // [block][channel half][step][64]
  alignas(64) int32_t cs[kSub][kPass * 32];  // the C tiles out as [row][32 channels]
  alignas(64) float sc[kSub][4][16];         // the blocks' channel scales: ds 0-15, 16-31, dm 0-15, 16-31
  if (const int64_t shape = std::min(rows, kPass); shape != tile_rows) {
    _tile_loadconfig(&kTiles.n[shape]);
    tile_rows = shape;
  }
  for (int64_t e0 = 0; e0 < B; e0 += kSub) {
    const int64_t e1 = std::min(e0 + kSub, B);
    if constexpr (!Q8)
      for (int64_t b = e0; b < e1; ++b) {
        const uint8_t* wq = panel + (b >> 3) * SUPER + HDR + (b & 7) * REC + SB;
        uint8_t* out = wu + (b - e0) * 1024;
        for (int k = 0; k < 8; ++k) {
          __m512i w0, w1, w2, w3;
          if constexpr (Q5) G::load_q5(wq + 80 * k, w0, w1, w2, w3);
          else G::load_q4(wq + 64 * k, w0, w1, w2, w3);
          _mm512_store_si512(out + 64 * k, w0);
          _mm512_store_si512(out + 512 + 64 * k, w1);
        }
      }
    for (int64_t r = 0; r < rows; r += kPass) {
      const int64_t n = std::min(kPass, rows - r);
      const bool two = n > 16;
      const int8_t* xr = xq + r * K;
      for (int64_t b = e0; b < e1; ++b) {  // the blocks' exact sums into cs, their scales into sc
        const uint8_t* hdr = panel + (b >> 3) * SUPER;
        const uint8_t* blk = hdr + HDR + (b & 7) * REC;
        const uint8_t* w = Q8 ? blk + SB : wu + (b - e0) * 1024;
        constexpr int64_t ldw = Q8 ? 128 : 64, half = Q8 ? 64 : 512;
        int32_t* c = cs[b - e0];
        _tile_loadd(2, w, ldw);
        _tile_loadd(3, w + half, ldw);
        AMX_SUMS16(Q8, 0, 4, 5, xr + 32 * b, K, c);
        if (two) AMX_SUMS16(Q8, 1, 6, 7, xr + 16 * K + 32 * b, K, c + 16 * 32);
        // gguf_loop.h's channel scales: d (fp16), Q4_1's m, Q4_K's d * sc and dmin * mn (exact)
        const uint16_t* d = reinterpret_cast<const uint16_t*>(Q4K ? hdr : blk);
        __m512 ds0 = G::half(d), ds1 = G::half(d + 16), dm0 = _mm512_setzero_ps(), dm1 = dm0;
        if constexpr (Q41) dm0 = G::half(d + 32), dm1 = G::half(d + 48);
        if constexpr (Q4K) {
          ds0 = G::mul_f(ds0, G::to_float(G::u8x(blk)));
          ds1 = G::mul_f(ds1, G::to_float(G::u8x(blk + 16)));
          dm0 = G::mul_f(G::half(d + 32), G::to_float(G::u8x(blk + 32)));
          dm1 = G::mul_f(G::half(d + 48), G::to_float(G::u8x(blk + 48)));
        }
        G::store_f(sc[b - e0][0], ds0), G::store_f(sc[b - e0][1], ds1);
        G::store_f(sc[b - e0][2], dm0), G::store_f(sc[b - e0][3], dm1);
      }
      for (int64_t i = 0; i < n; i += P) {  // gguf_loop.h's float steps, f += t, block by block
        const int64_t s = (r + i) * B, e = s + (P - 1) * B;  // the row's first and last sub-row
        float* f = acc + 32 * (r + i);
        __m512 f0 = G::load_f(f), f1 = G::load_f(f + 16);
        for (int64_t b = e0; b < e1; ++b) {
          const int32_t* c = cs[b - e0] + 32 * i;
          __m512i a0 = _mm512_load_si512(c), a1 = _mm512_load_si512(c + 16);
          int32_t x = xs[s + b];
          if constexpr (P == 2) {  // I = 256 isum_0 + isum_1, xs = 256 xs_0 + xs_1: exact in int32
            a0 = G::add_i(G::shl8(a0), _mm512_load_si512(c + 32));
            a1 = G::add_i(G::shl8(a1), _mm512_load_si512(c + 48));
            x = 256 * x + xs[e + b];
          }
          if constexpr (C != 0) a0 = G::sub_i(a0, C * x), a1 = G::sub_i(a1, C * x);
          const __m512 sx = G::set1_f(dx[e + b]);
          __m512 t0 = G::mul_f(G::to_float(a0), G::mul_f(G::load_f(sc[b - e0][0]), sx));
          __m512 t1 = G::mul_f(G::to_float(a1), G::mul_f(G::load_f(sc[b - e0][1]), sx));
          if constexpr (Q41 || Q4K) {
            const __m512 sm = G::set1_f(xm[e + b]);
            const __m512 m0 = G::mul_f(G::load_f(sc[b - e0][2]), sm), m1 = G::mul_f(G::load_f(sc[b - e0][3]), sm);
            if constexpr (Q41) t0 = G::add_f(t0, m0), t1 = G::add_f(t1, m1);
            else t0 = G::sub_f(t0, m0), t1 = G::sub_f(t1, m1);
          }
          f0 = G::add_f(f0, t0);
          f1 = G::add_f(f1, t1);
        }
        G::store_f(f, f0);
        G::store_f(f + 16, f1);
      }
    }
  }
}

#undef AMX_SUMS16

#define AMX_ROWS {kGgufAmxRows[0], kGgufAmxRows[1], kGgufAmxRows[2], kGgufAmxRows[3], kGgufAmxRows[4], kGgufAmxRows[5]}
constexpr GgufWide kGgufAmx = {{AMX_ROWS, AMX_ROWS},
                               begin, end,
                               {{panel<kQ4_0, 1>, panel<kQ4_1, 1>, panel<kQ8_0, 1>, panel<kQ5_0, 1>, panel<kQ4_K, 1>, nullptr},
                                {panel<kQ4_0, 2>, panel<kQ4_1, 2>, panel<kQ8_0, 2>, panel<kQ5_0, 2>, panel<kQ4_K, 2>, nullptr}}};

#undef AMX_ROWS
}  // namespace amx
}  // namespace isa
#pragma GCC pop_options
