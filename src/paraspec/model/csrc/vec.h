// Operations built on isa_*.h's vector API, shared by the algorithm headers.
namespace isa {

// Sum of the 16 lanes in the order GCC's _mm512_reduce_add_ps takes (halves, quarters, pairs),
// so a reduction has the same bits in both modules.
// hsum's steps after the fold: with t = fold(a), (t4 + t0) + (t6 + t2) + ((t5 + t1) + (t7 + t3)).
inline float hsum8(__m256 t) {
  const __m128 u = _mm_add_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
  const __m128 w = _mm_add_ps(u, _mm_shuffle_ps(u, u, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(w) + _mm_cvtss_f32(_mm_shuffle_ps(w, w, 1));
}
inline float hsum(F16 a) { return hsum8(fold(a)); }


// hsum8 of 8 vectors at once (lane j: hsum8(f[j])), the same additions done across vectors:
// fewer shuffles per sum, and no chain of dependent steps per sum.
inline __m256 sum8(const __m256* f) {
  __m256 u[4];  // u[i] = [u of f[2i] | u of f[2i+1]], u = upper 4 lanes + lower 4
  for (int i = 0; i < 4; ++i)
    u[i] = _mm256_add_ps(_mm256_permute2f128_ps(f[2 * i], f[2 * i + 1], 0x31),
                         _mm256_permute2f128_ps(f[2 * i], f[2 * i + 1], 0x20));
  __m256 w[2];  // w[i], 128-bit lane h: (u0 + u2, u1 + u3) of f[4i + h], then of f[4i + 2 + h]
  for (int i = 0; i < 2; ++i)
    w[i] = _mm256_add_ps(_mm256_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm256_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // w0 + w1 of f[0], f[2], f[4], f[6] | of f[1], f[3], f[5], f[7]; then in order
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

#ifndef PARASPEC_SUM16
// Lane j: hsum(a[j]), for 16 vectors: two sum8 into isa_avx2.h's two halves (isa_avx512.h has
// its own, in zmm registers).
inline F16 sum16(const F16* a) {
  __m256 f[16];
  for (int j = 0; j < 16; ++j) f[j] = fold(a[j]);
  return {sum8(f), sum8(f + 8)};
}
#endif

// exp for x <= 0 (scores minus their max): 2^n * p(r) with x = n ln2 + r, |r| <= ln2/2, p a
// degree-7 Taylor polynomial (truncation ~5e-9 relative). Below -87.3 the result flushes to 0
// as expf's would underflow.
inline F16 exp16(F16 x) {
  x = max(x, set1(-87.3f));
  const F16 n = round(mul(x, set1(1.44269504088896341f)));
  F16 r = fnmadd(n, set1(0.693359375f), x);
  r = fnmadd(n, set1(-2.12194440e-4f), r);
  F16 p = set1(1.0f / 5040);
  p = fmadd(p, r, set1(1.0f / 720));
  p = fmadd(p, r, set1(1.0f / 120));
  p = fmadd(p, r, set1(1.0f / 24));
  p = fmadd(p, r, set1(1.0f / 6));
  p = fmadd(p, r, set1(0.5f));
  p = fmadd(p, r, set1(1.0f));
  p = fmadd(p, r, set1(1.0f));
  return scale2n(p, n);
}

}  // namespace isa
