// Operations built on isa_*.h's vector API, shared by the algorithm headers.
namespace isa {

// Sum of the 16 lanes in the order GCC's _mm512_reduce_add_ps takes (halves, quarters, pairs),
// so a reduction has the same bits in both modules.
inline float hsum(F16 a) {
  const __m256 t = fold(a);
  const __m128 u = _mm_add_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
  const __m128 w = _mm_add_ps(u, _mm_shuffle_ps(u, u, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(w) + _mm_cvtss_f32(_mm_shuffle_ps(w, w, 1));
}

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
