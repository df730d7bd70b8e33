// Vector operations for the AVX2 module (_kernels_avx2): AVX2 + FMA (with F16C).
// Included by kernels.cpp inside its `#pragma GCC push_options` region.
//
// Same API as isa_avx512.h, each 16-lane vector held in two ymm registers (lo = lanes 0-7).
// Every operation is per lane or spelled in the order the AVX-512 one sums (fold), so the two
// modules give the same bits: 2^n comes from the exponent bits instead of scalef (the same
// exact product, n being an integer in [-126, 0] here), masked loads zero the lanes past n.
#pragma GCC target("avx2,fma,f16c")

#define PARASPEC_ISA "avx2"
// every feature the target line enables (the builtin also checks that the OS saves ymm state)
#define PARASPEC_CPU_SUPPORTED() \
  (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))

namespace isa {

struct F16 { __m256 lo, hi; };
struct I16 { __m256i lo, hi; };

// attention sums V in tiles of up to kVPairs (row, head) pairs, with kVAcc F16 accumulators (ymm pairs)
constexpr int kVPairs = 2, kVAcc = 4;
// attention's scores put the keys in lanes from kLanePairs pairs on, in tiles of kLaneT pairs x
// kLaneB blocks of 16 keys (measured on AVX-512 hardware: with 16 ymm the transposes pay off only
// from ~16 pairs, and there about even with the per-key path once K and V come from memory)
constexpr int kLanePairs = 16, kLaneT = 2, kLaneB = 1;
// the dense linear's register tile: kLinRows rows x kLinCols channels of accumulators
constexpr int kLinRows = 2, kLinCols = 3;
constexpr int64_t kLinSeg = 768;  // most floats of K per segment when several row tiles share a block

inline __m256i lanes_below(int64_t n) {  // int32 lanes i < n all ones
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::max<int64_t>(n, 0))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline F16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline F16 set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
inline F16 load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline F16 load_reg(const float* p) {  // a load GCC may not fold into each instruction using it
  F16 a = load(p);
  asm("" : "+x"(a.lo), "+x"(a.hi));
  return a;
}
inline F16 loadn(const float* p, int64_t n) {  // masked-off lanes are not read
  return {_mm256_maskload_ps(p, lanes_below(n)), _mm256_maskload_ps(p + 8, lanes_below(n - 8))};
}
inline F16 loadn(const uint16_t* p, int64_t n) {  // bf16 bits -> fp32 (exact)
  alignas(32) uint16_t t[16] = {};
  if (n < 16) std::memcpy(t, p, n * sizeof(uint16_t));  // no masked 16-bit loads in AVX2
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(n < 16 ? t : p));
  const __m256i lo = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(h));
  const __m256i hi = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(lo, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16))};
}
inline __m256 bf16x8(const uint16_t* p) {  // 8 bf16 -> fp32: each word into the top of its dword
  const __m256i h = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i pick = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,
                                        -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15);
  return _mm256_castsi256_ps(_mm256_shuffle_epi8(h, pick));
}
inline F16 load(const uint16_t* p) { return {bf16x8(p), bf16x8(p + 8)}; }  // 16 bf16 -> fp32 (exact)
inline F16 load_half(const uint16_t* p) {  // 16 fp16 -> fp32 (exact; F16C, which every AVX2 CPU has)
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
inline void store_half(uint16_t* p, F16 a) {  // 16 fp32 -> fp16, rounded to nearest even (as torch's .half())
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(a.lo, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), _mm256_cvtps_ph(a.hi, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void store(float* p, F16 a) { _mm256_storeu_ps(p, a.lo); _mm256_storeu_ps(p + 8, a.hi); }
inline void storen(float* p, F16 a, int64_t n) {
  _mm256_maskstore_ps(p, lanes_below(n), a.lo);
  _mm256_maskstore_ps(p + 8, lanes_below(n - 8), a.hi);
}

// per-lane operations, applied to both halves. A macro: the intrinsics are gnu_inline functions
// without an out-of-line copy, so they cannot be template arguments.
#define PS_LANEWISE(T, name, op) \
  inline T name(T a, T b) { return {op(a.lo, b.lo), op(a.hi, b.hi)}; }
PS_LANEWISE(F16, add, _mm256_add_ps)
PS_LANEWISE(F16, sub, _mm256_sub_ps)
PS_LANEWISE(F16, mul, _mm256_mul_ps)
PS_LANEWISE(F16, div, _mm256_div_ps)
PS_LANEWISE(F16, max, _mm256_max_ps)
PS_LANEWISE(I16, add, _mm256_add_epi32)
PS_LANEWISE(I16, sub, _mm256_sub_epi32)
PS_LANEWISE(I16, min, _mm256_min_epi32)
PS_LANEWISE(I16, max, _mm256_max_epi32)
#undef PS_LANEWISE
inline F16 fmadd(F16 a, F16 b, F16 c) {  // a * b + c
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
inline F16 fnmadd(F16 a, F16 b, F16 c) {  // c - a * b
  return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
}
inline F16 abs(F16 a) {
  const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  return {_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m)};
}
inline F16 round(F16 a) {
  constexpr int mode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  return {_mm256_round_ps(a.lo, mode), _mm256_round_ps(a.hi, mode)};
}
inline __m256 pow2(__m256 n) {  // 2^n for integral n in [-126, 127]: the exponent field
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
inline F16 scale2n(F16 p, F16 n) { return {_mm256_mul_ps(p.lo, pow2(n.lo)), _mm256_mul_ps(p.hi, pow2(n.hi))}; }
inline __m256 fold(F16 a) { return _mm256_add_ps(a.hi, a.lo); }

// r[i][j] -> r[j][i] for an 8 x 8 block of ymm rows (pure data movement, exact)
inline void transpose8(__m256* r) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2)  // pairs of rows interleaved
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4) {  // 4 rows per 128-bit lane: columns c, c + 4 of rows i .. i + 3
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int c = 0; c < 4; ++c)
    r[c] = _mm256_permute2f128_ps(u[c], u[c + 4], 0x20), r[c + 4] = _mm256_permute2f128_ps(u[c], u[c + 4], 0x31);
}
// r[i][j] -> r[j][i] for a 16 x 16 block: four 8 x 8 blocks (lo: lanes 0-7)
inline void transpose16(F16* r) {
  __m256 a[8], b[8], c[8], d[8];
  for (int i = 0; i < 8; ++i) a[i] = r[i].lo, b[i] = r[i + 8].lo, c[i] = r[i].hi, d[i] = r[i + 8].hi;
  transpose8(a), transpose8(b), transpose8(c), transpose8(d);
  for (int j = 0; j < 8; ++j) r[j] = {a[j], b[j]}, r[j + 8] = {c[j], d[j]};
}
inline float reduce_max(F16 a) {  // exact in any order
  __m256 m = _mm256_max_ps(a.lo, a.hi);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return std::max(_mm_cvtss_f32(h), _mm_cvtss_f32(_mm_shuffle_ps(h, h, 1)));
}

inline I16 load(const int32_t* p) {
  return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8))};
}
inline I16 set1(int32_t x) { return {_mm256_set1_epi32(x), _mm256_set1_epi32(x)}; }
inline F16 to_float(I16 a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
inline int32_t reduce_add(I16 a) {  // exact in any order
  const __m256i s = _mm256_add_epi32(a.lo, a.hi);
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
  return _mm_cvtsi128_si32(t);
}
inline I16 to_int(F16 a) { return {_mm256_cvtps_epi32(a.lo), _mm256_cvtps_epi32(a.hi)}; }  // half to even
inline I16 clamp(I16 a, int32_t lo, int32_t hi) { return min(max(a, set1(lo)), set1(hi)); }
inline void store_bytes(uint8_t* p, I16 a, int64_t n) {  // low byte of each lane
  const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i idx = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
  const __m256i lo = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(a.lo, pick), idx);  // bytes 0-7
  const __m256i hi = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(a.hi, pick), idx);
  alignas(16) uint8_t t[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(t),
                  _mm_unpacklo_epi64(_mm256_castsi256_si128(lo), _mm256_castsi256_si128(hi)));
  std::memcpy(p, t, std::min<int64_t>(n, 16));
}

// W8A8 inner steps (w8a8_loop.h); a 32-channel panel step is 4 ymm of 8 channels x 4 features.
// "avx2": no u8 x s8 dot with int32 sums, and vpmaddubsw saturates int16, so u8 (q + 128)
// products cannot be used: it multiplies |x| by the weights carrying x's sign (vpsignb), each
// pair of products is at most 2 * 127 * 127 < 2^15, and vpmaddwd by ones widens to int32.
struct Ymm8x4 {  // loads and stores shared by both ymm steps
  using Acc = __m256i;
  static constexpr int kVecs = 4;
  static Acc load_acc(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store_acc(int32_t* p, Acc a) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), a); }
  static Acc zero_acc() { return _mm256_setzero_si256(); }
  static Acc load_w(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  // a Q4 block's 32 nibbles per 16 bytes as u8 (low nibbles then high), for both GGUF ymm steps
  static void load_q4(const uint8_t* p, Acc& w0, Acc& w1, Acc& w2, Acc& w3) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
    const __m256i lo = _mm256_set1_epi8(0x0F);
    w0 = _mm256_and_si256(b0, lo), w1 = _mm256_and_si256(b1, lo);
    w2 = _mm256_and_si256(_mm256_srli_epi16(b0, 4), lo), w3 = _mm256_and_si256(_mm256_srli_epi16(b1, 4), lo);
  }
  // Q5_0: the nibbles | 16 where the step's bit is set (32 bits per register: each byte of
  // the broadcast dword to 8 lanes, tested against its own bit)
  static void load_q5(const uint8_t* p, Acc& w0, Acc& w1, Acc& w2, Acc& w3) {
    load_q4(p, w0, w1, w2, w3);
    const __m256i pick = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe), b4 = _mm256_set1_epi8(16);
    Acc* w[4] = {&w0, &w1, &w2, &w3};
    for (int j = 0; j < 4; ++j) {
      int32_t bits;
      std::memcpy(&bits, p + 64 + 4 * j, 4);
      const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(bits), pick), others),
                                            _mm256_set1_epi8(-1));
      *w[j] = _mm256_or_si256(*w[j], _mm256_and_si256(set, b4));
    }
  }
  // Q6_K: the nibbles | bits 4-5 from the step's 32 bytes of pairs (byte i: pairs of U[i],
  // U[32 + i], U[64 + i], U[96 + i])
  static void load_q6(const uint8_t* lo, const uint8_t* hi, Acc& w0, Acc& w1, Acc& w2, Acc& w3) {
    load_q4(lo, w0, w1, w2, w3);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)), m = _mm256_set1_epi8(0x30);
    w0 = _mm256_or_si256(w0, _mm256_and_si256(_mm256_slli_epi16(h, 4), m));
    w1 = _mm256_or_si256(w1, _mm256_and_si256(_mm256_slli_epi16(h, 2), m));
    w2 = _mm256_or_si256(w2, _mm256_and_si256(h, m));
    w3 = _mm256_or_si256(w3, _mm256_and_si256(_mm256_srli_epi16(h, 2), m));
  }
  // for the GGUF loop's integer and float steps (8 channels per ymm)
  static Acc sub_i(Acc a, int32_t c) { return _mm256_sub_epi32(a, _mm256_set1_epi32(c)); }
  static Acc set1_i(int32_t c) { return _mm256_set1_epi32(c); }
  static Acc add_i(Acc a, Acc b) { return _mm256_add_epi32(a, b); }
  static Acc shl8(Acc a) { return _mm256_slli_epi32(a, 8); }  // 256 a (two's complement)
  static Acc mullo(Acc a, Acc b) { return _mm256_mullo_epi32(a, b); }
  static Acc u8x(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static Acc s8x(const uint8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  // gguf_wide.h: its L1 buffer of unpacked steps, and AVX2's int16 pair sums (vpmaddubsw, summed
  // over steps with vpaddw while they cannot overflow, then widened by vpmaddwd with ones)
  static Acc load_b(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store_b(uint8_t* p, Acc a) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), a); }
  static Acc dot16(Acc w, Acc x) { return _mm256_maddubs_epi16(w, x); }
  static Acc add16(Acc a, Acc b) { return _mm256_add_epi16(a, b); }
  static Acc widen16(Acc a) { return _mm256_madd_epi16(a, _mm256_set1_epi16(1)); }
  using Flt = __m256;
  static Flt load_f(const float* p) { return _mm256_loadu_ps(p); }
  static void store_f(float* p, Flt a) { _mm256_storeu_ps(p, a); }
  static Flt zero_f() { return _mm256_setzero_ps(); }
  static Flt set1_f(float x) { return _mm256_set1_ps(x); }
  static Flt half(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static Flt to_float(Acc a) { return _mm256_cvtepi32_ps(a); }
  static Flt mul_f(Flt a, Flt b) { return _mm256_mul_ps(a, b); }
  static Flt add_f(Flt a, Flt b) { return _mm256_add_ps(a, b); }
  static Flt sub_f(Flt a, Flt b) { return _mm256_sub_ps(a, b); }
};

namespace avx2 {
struct Op : Ymm8x4 {
  static constexpr int kRows = 2;    // 8 accumulators + weights + 2 x 2 activation forms
  static constexpr int kOffset = 0;  // activations stored as s8
  struct X { __m256i mag, sgn; };
  static X prep(int32_t x4) {
    const __m256i x = _mm256_set1_epi32(x4);
    return {_mm256_abs_epi8(x), x};
  }
  static Acc mac(Acc acc, X x, Acc w) {
    const __m256i pairs = _mm256_maddubs_epi16(x.mag, _mm256_sign_epi8(w, x.sgn));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};

#include "w8a8_loop.h"

// GGUF inner step (gguf_loop.h), 8 channels per ymm. Q4: vpmaddubsw of u8 nibbles (<= 15) by
// s8 activations cannot saturate (2 * 15 * 127 < 2^15); Q8_0: |x| times the weights carrying
// x's sign, as the W8A8 step above (2 * 127 * 127 < 2^15). vpmaddwd by ones widens to int32.
struct GOp : Ymm8x4 {
  static constexpr int kRows = 2;        // 8 accumulators + 4 weights + constants
  static constexpr int kRows2 = 2;
  static constexpr int kQ8Offset = 0;
  static constexpr bool kPairs16 = true;  // gguf_wide.h sums Q4 / Q5 / Q6 products in int16 groups
  // the formats gguf_wide.h runs (bit per GgufFormat): not Q8_0, whose 4 instructions per step
  // (vpsignb, vpmaddubsw, vpmaddwd, vpaddd) are the same either way, and no faster there; and
  // from how many sub-rows. With one pass a kRows tile holds two whole rows, and unpacking each
  // step again per tile from L1 beat the unpacked buffer at every verify size, but not a prompt
  // chunk's 64-row blocks (docs/design-notes.md)
  static constexpr int wide_formats(int) { return 0b111011; }
  static constexpr int64_t wide_min_rows(int P) { return P == 1 ? 64 : 3; }
  static void load_q8(const uint8_t* p, Acc& w0, Acc& w1, Acc& w2, Acc& w3) {
    w0 = load_w(reinterpret_cast<const int8_t*>(p)), w1 = load_w(reinterpret_cast<const int8_t*>(p + 32));
    w2 = load_w(reinterpret_cast<const int8_t*>(p + 64)), w3 = load_w(reinterpret_cast<const int8_t*>(p + 96));
  }
  struct X { __m256i mag, sgn; };
  static Acc prep4(int32_t x4) { return _mm256_set1_epi32(x4); }
  static X prep8(int32_t x4) {
    const __m256i x = _mm256_set1_epi32(x4);
    return {_mm256_abs_epi8(x), x};
  }
  static Acc mac4(Acc acc, Acc x, Acc w) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
  }
  static Acc mac8(Acc acc, X x, Acc w) {
    const __m256i pairs = _mm256_maddubs_epi16(x.mag, _mm256_sign_epi8(w, x.sgn));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
};
#include "gguf_loop.h"
#include "gguf_wide.h"
}  // namespace avx2

}  // namespace isa

// "avxvnni": the VEX vpdpbusd of AVX2 CPUs with AVX-VNNI (Intel Alder Lake on), u8 q + 128 as
// for AVX-512, compiled in its own region: only this loop may use it, and it runs only where
// CPUID says avxvnni. GCC 11 was the first to know the instruction; older ones leave it out.
#if __GNUC__ >= 11
#define PARASPEC_AVXVNNI 1
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
namespace isa {

namespace avxvnni {
struct Op : Ymm8x4 {
  static constexpr int kRows = 3;  // 12 accumulators + weight + activation
  static constexpr int kOffset = 128;
  static Acc prep(int32_t x4) { return _mm256_set1_epi32(x4); }
  static Acc mac(Acc acc, Acc x, Acc w) { return _mm256_dpbusd_avx_epi32(acc, x, w); }
};

#include "w8a8_loop.h"

// GGUF: the AVX-512 step on ymm (Q8_0 weights flipped to w + 128 for the u8 operand).
struct GOp : Ymm8x4 {
  static constexpr int kRows = 2;  // 8 accumulators + 4 weights + activation
  static constexpr int kRows2 = 2;
  static constexpr int kQ8Offset = 128;
  static constexpr bool kPairs16 = false;  // vpdpbusd sums into int32 directly
  // the formats gguf_wide.h runs: Q4_0, Q5_0, Q4_K, Q6_K. With one vpdpbusd per step Q4_1 and
  // Q8_0 were no faster on its tiles (docs/design-notes.md).
  static constexpr int wide_formats(int) { return 0b111001; }
  static constexpr int64_t wide_min_rows(int) { return 3; }
  static void load_q8(const uint8_t* p, Acc& w0, Acc& w1, Acc& w2, Acc& w3) {
    const __m256i flip = _mm256_set1_epi8(-128);
    w0 = _mm256_xor_si256(load_w(reinterpret_cast<const int8_t*>(p)), flip);
    w1 = _mm256_xor_si256(load_w(reinterpret_cast<const int8_t*>(p + 32)), flip);
    w2 = _mm256_xor_si256(load_w(reinterpret_cast<const int8_t*>(p + 64)), flip);
    w3 = _mm256_xor_si256(load_w(reinterpret_cast<const int8_t*>(p + 96)), flip);
  }
  static Acc prep4(int32_t x4) { return _mm256_set1_epi32(x4); }
  static Acc prep8(int32_t x4) { return _mm256_set1_epi32(x4); }
  static Acc mac4(Acc acc, Acc x, Acc w) { return _mm256_dpbusd_avx_epi32(acc, w, x); }
  static Acc mac8(Acc acc, Acc x, Acc w) { return _mm256_dpbusd_avx_epi32(acc, w, x); }
};
#include "gguf_loop.h"
#include "gguf_wide.h"
}  // namespace avxvnni

}  // namespace isa
#pragma GCC pop_options
#endif
