// Vector operations for the AVX-512 module (_kernels_avx512), included by kernels.cpp inside
// its `#pragma GCC push_options` region: everything defined here and in the algorithm headers
// after it is compiled for the target below; the module's init code stays plain x86-64.
//
// The algorithm headers see a 16-lane float vector (F16) and a 16-lane int32 vector (I16); here
// each is one register. isa_avx2.h has the same API on pairs
// of ymm registers, lane for lane the same arithmetic, so both modules give the same bits.
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,fma")

#define PARASPEC_ISA "avx512"
// every feature the target line enables (the builtin also checks that the OS saves zmm state)
#define PARASPEC_CPU_SUPPORTED()                                                        \
  (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&           \
   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&        \
   __builtin_cpu_supports("fma"))

namespace isa {

struct F16 { __m512 v; };
struct I16 { __m512i v; };

// attention sums V in tiles of up to kVPairs (row, head) pairs, with kVAcc F16 accumulators (zmm)
constexpr int kVPairs = 4, kVAcc = 16;
// attention's scores put the keys in lanes from kLanePairs pairs on (below, the K transposes cost
// more than they save), in tiles of kLaneT pairs x kLaneB blocks of 16 keys (measured: 2 x 2 keeps
// the K vectors and broadcasts at one load per fma)
constexpr int kLanePairs = 6, kLaneT = 2, kLaneB = 2;
// the dense linear's register tile: kLinRows rows x kLinCols channels of accumulators
constexpr int kLinRows = 4, kLinCols = 6;
constexpr int64_t kLinSeg = 768;  // most floats of K per segment when several row tiles share a block

inline __mmask16 first(int64_t n) {  // lanes [0, min(n, 16))
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

inline F16 zero() { return {_mm512_setzero_ps()}; }
inline F16 set1(float x) { return {_mm512_set1_ps(x)}; }
inline F16 load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline F16 load_reg(const float* p) {  // a load GCC may not fold into each instruction using it
  F16 a = load(p);
  asm("" : "+v"(a.v));
  return a;
}
inline F16 loadn(const float* p, int64_t n) { return {_mm512_maskz_loadu_ps(first(n), p)}; }
inline F16 loadn(const uint16_t* p, int64_t n) {  // bf16 bits -> fp32 (exact)
  const __m256i h = _mm256_maskz_loadu_epi16(first(n), p);
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
inline F16 load(const uint16_t* p) {  // 16 bf16 -> fp32 (exact); as fast as one vpermw here
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
inline F16 load_half(const uint16_t* p) {  // 16 fp16 -> fp32 (exact)
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline void store_half(uint16_t* p, F16 a) {  // 16 fp32 -> fp16, rounded to nearest even (as torch's .half())
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void store(float* p, F16 a) { _mm512_storeu_ps(p, a.v); }
inline void storen(float* p, F16 a, int64_t n) { _mm512_mask_storeu_ps(p, first(n), a.v); }
inline F16 add(F16 a, F16 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline F16 sub(F16 a, F16 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline F16 mul(F16 a, F16 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline F16 div(F16 a, F16 b) { return {_mm512_div_ps(a.v, b.v)}; }
inline F16 fmadd(F16 a, F16 b, F16 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }    // a * b + c
inline F16 fnmadd(F16 a, F16 b, F16 c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }  // c - a * b
inline F16 max(F16 a, F16 b) { return {_mm512_max_ps(a.v, b.v)}; }
inline F16 abs(F16 a) { return {_mm512_abs_ps(a.v)}; }
inline F16 round(F16 a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
inline F16 scale2n(F16 p, F16 n) { return {_mm512_scalef_ps(p.v, n.v)}; }  // p * 2^n, n integral
inline __m256 fold(F16 a) {  // upper 8 lanes + lower 8 (first step of a sum)
  return _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1)),
                       _mm512_castps512_ps256(a.v));
}
inline float reduce_max(F16 a) { return _mm512_reduce_max_ps(a.v); }  // exact in any order

// r[i][j] -> r[j][i] for a 16 x 16 block (pure data movement, exact): four steps, step h = 1, 2,
// 4, 8 swapping bit h of the row with bit h of the lane, each vector from two rows (vpermt2ps:
// lane j of row i keeps its own element where j lacks bit h, else takes row i + h's lane j - h).
template <int h>
inline void transpose_step(F16* r, __m512i lo, __m512i hi) {
  for (int i = 0; i < 16; ++i)
    if (!(i & h)) {
      const __m512 a = r[i].v, b = r[i + h].v;
      r[i].v = _mm512_permutex2var_ps(a, lo, b);
      r[i + h].v = _mm512_permutex2var_ps(a, hi, b);
    }
}
inline void transpose16(F16* r) {
  transpose_step<1>(r, _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
                    _mm512_setr_epi32(1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31));
  transpose_step<2>(r, _mm512_setr_epi32(0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
                    _mm512_setr_epi32(2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31));
  transpose_step<4>(r, _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
                    _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31));
  transpose_step<8>(r, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
                    _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));
}

// Lane j: hsum(a[j]) (vec.h's order) for 16 vectors at once: the same additions as hsum's, done
// across vectors (each level adds the lanes hsum pairs: i and i + 8, i and i + 4, i and i + 2,
// i and i + 1), 46 instructions instead of 16 folds and two sum8.
#define PARASPEC_SUM16 1
inline F16 sum16(const F16* a) {
  __m512 b[8];  // b[p] = [fold(a[2p]) | fold(a[2p + 1])]
  for (int p = 0; p < 8; ++p)
    b[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p].v, a[2 * p + 1].v, 0xEE),
                         _mm512_shuffle_f32x4(a[2 * p].v, a[2 * p + 1].v, 0x44));
  __m512 c[4];  // quarter j of c[q]: hsum8's u (upper 4 + lower 4) of a[4q + j]
  for (int q = 0; q < 4; ++q)
    c[q] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * q], b[2 * q + 1], 0xDD),
                         _mm512_shuffle_f32x4(b[2 * q], b[2 * q + 1], 0x88));
  __m512 d[2];  // quarter j of d[r]: (u0 + u2, u1 + u3) of a[8r + j], then of a[8r + 4 + j]
  for (int r = 0; r < 2; ++r)
    d[r] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * r], c[2 * r + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(c[2 * r], c[2 * r + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // lane 4j + m: the sum of a[4m + j]; then transposed to lane order
  const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return {_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), e)};
}

inline I16 load(const int32_t* p) { return {_mm512_loadu_si512(p)}; }
inline I16 set1(int32_t x) { return {_mm512_set1_epi32(x)}; }
inline I16 add(I16 a, I16 b) { return {_mm512_add_epi32(a.v, b.v)}; }
inline I16 sub(I16 a, I16 b) { return {_mm512_sub_epi32(a.v, b.v)}; }
inline F16 to_float(I16 a) { return {_mm512_cvtepi32_ps(a.v)}; }
inline int32_t reduce_add(I16 a) { return _mm512_reduce_add_epi32(a.v); }  // exact in any order
inline I16 to_int(F16 a) { return {_mm512_cvtps_epi32(a.v)}; }  // rounds half to even
inline I16 clamp(I16 a, int32_t lo, int32_t hi) {
  return {_mm512_min_epi32(_mm512_max_epi32(a.v, _mm512_set1_epi32(lo)), _mm512_set1_epi32(hi))};
}
inline void store_bytes(uint8_t* p, I16 a, int64_t n) {  // low byte of each lane
  _mm_mask_storeu_epi8(p, first(n), _mm512_cvtepi32_epi8(a.v));
}

// W8A8 inner step (w8a8_loop.h): vpdpbusd, u8 activations (q + 128) times s8 weights, 4
// products summed into each int32 lane; a 32-channel panel step is 2 registers.
namespace vnni512 {
struct Op {
  using Acc = __m512i;
  static constexpr int kVecs = 2;    // accumulators per sub-row
  static constexpr int kRows = 8;    // sub-rows per register tile: 16 accumulators + 2 weights
  static constexpr int kOffset = 128;
  static Acc prep(int32_t x4) { return _mm512_set1_epi32(x4); }
  static Acc mac(Acc acc, Acc x, Acc w) { return _mm512_dpbusd_epi32(acc, x, w); }
  static Acc load_acc(const int32_t* p) { return _mm512_loadu_si512(p); }
  static void store_acc(int32_t* p, Acc a) { _mm512_storeu_si512(p, a); }
  static Acc zero_acc() { return _mm512_setzero_si512(); }
  static Acc load_w(const int8_t* p) { return _mm512_loadu_si512(p); }
};
#include "w8a8_loop.h"

// GGUF inner step (gguf_loop.h): vpdpbusd with the weights as the u8 operand (Q4 nibbles 0..15;
// Q8_0 flipped to w + 128, whose excess 128 * xs the epilogue takes off) and s8 activations.
struct GOp {
  using Acc = __m512i;
  static constexpr int kVecs = 2;       // accumulators per row (16 channels each)
  static constexpr int kRows = 4;       // rows per register tile: 8 int + 8 float accumulators
  static constexpr int kRows2 = 8;      // two passes: 4 rows' 16 int + 8 float accumulators
  static constexpr int kQ8Offset = 128;
  static constexpr bool kPairs16 = false;  // (AVX2's int16 sums: isa_avx2.h)
  static void load_q4(const uint8_t* p, Acc& w0, Acc& w1, Acc&, Acc&) {
    const __m512i b = _mm512_loadu_si512(p), lo = _mm512_set1_epi8(0x0F);
    w0 = _mm512_and_si512(b, lo);
    w1 = _mm512_and_si512(_mm512_srli_epi16(b, 4), lo);
  }
  static void load_q8(const uint8_t* p, Acc& w0, Acc& w1, Acc&, Acc&) {
    const __m512i flip = _mm512_set1_epi8(-128);
    w0 = _mm512_xor_si512(_mm512_loadu_si512(p), flip);
    w1 = _mm512_xor_si512(_mm512_loadu_si512(p + 64), flip);
  }
  // Q5_0: the nibbles, plus 16 where the step's bit (one per byte of U, 64 per register) is set
  static void load_q5(const uint8_t* p, Acc& w0, Acc& w1, Acc& w2, Acc& w3) {
    load_q4(p, w0, w1, w2, w3);
    uint64_t k0, k1;
    std::memcpy(&k0, p + 64, 8), std::memcpy(&k1, p + 72, 8);
    const __m512i b4 = _mm512_set1_epi8(16);
    w0 = _mm512_mask_add_epi8(w0, k0, w0, b4);
    w1 = _mm512_mask_add_epi8(w1, k1, w1, b4);
  }
  // Q6_K: the nibbles | bits 4-5 from the step's 32 bytes of pairs (byte i: pairs of U[i],
  // U[32 + i], U[64 + i], U[96 + i]), both halves of a register shifted by their own count
  static void load_q6(const uint8_t* lo, const uint8_t* hi, Acc& w0, Acc& w1, Acc& w2, Acc& w3) {
    load_q4(lo, w0, w1, w2, w3);
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)));
    const __m512i m = _mm512_set1_epi8(0x30);
    w0 = _mm512_or_si512(w0, _mm512_and_si512(_mm512_sllv_epi64(h, _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4)), m));
    w1 = _mm512_or_si512(w1, _mm512_and_si512(_mm512_srlv_epi64(h, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0)), m));
  }
  static Acc prep4(int32_t x4) { return _mm512_set1_epi32(x4); }
  static Acc prep8(int32_t x4) { return _mm512_set1_epi32(x4); }
  static Acc mac4(Acc acc, Acc x, Acc w) { return _mm512_dpbusd_epi32(acc, w, x); }
  static Acc mac8(Acc acc, Acc x, Acc w) { return _mm512_dpbusd_epi32(acc, w, x); }
  static Acc zero_acc() { return _mm512_setzero_si512(); }
  static Acc sub_i(Acc a, int32_t c) { return _mm512_sub_epi32(a, _mm512_set1_epi32(c)); }
  static Acc set1_i(int32_t c) { return _mm512_set1_epi32(c); }
  static Acc add_i(Acc a, Acc b) { return _mm512_add_epi32(a, b); }
  static Acc shl8(Acc a) { return _mm512_slli_epi32(a, 8); }  // 256 a (two's complement)
  static Acc mullo(Acc a, Acc b) { return _mm512_mullo_epi32(a, b); }
  static Acc u8x(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static Acc s8x(const uint8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  using Flt = __m512;
  static Flt load_f(const float* p) { return _mm512_loadu_ps(p); }
  static void store_f(float* p, Flt a) { _mm512_storeu_ps(p, a); }
  static Flt zero_f() { return _mm512_setzero_ps(); }
  static Flt set1_f(float x) { return _mm512_set1_ps(x); }
  static Flt half(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static Flt to_float(Acc a) { return _mm512_cvtepi32_ps(a); }
  static Flt mul_f(Flt a, Flt b) { return _mm512_mul_ps(a, b); }
  static Flt add_f(Flt a, Flt b) { return _mm512_add_ps(a, b); }
  static Flt sub_f(Flt a, Flt b) { return _mm512_sub_ps(a, b); }
};
#include "gguf_loop.h"
}  // namespace vnni512

}  // namespace isa
