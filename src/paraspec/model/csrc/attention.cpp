// Decode / draft-verify attention for AVX-512 CPUs: one query row against the committed keys
// and the new keys its mask lets it see, for every row and head.
//
// Row invariance by construction: each (row, head) is computed alone, by one thread, over its
// visible keys in slot order (masked keys are skipped, not added as zeros), with a fixed
// instruction sequence. A draft node therefore sees exactly the keys, in the same order, that
// the one-token autoregressive step at its position sees after the cache is compacted, and its
// output has the same bits, whatever the number of query rows or the gaps a tree leaves.
// Scores and exp in fp32; the weighted sum of V in fp64 (as the torch path in transformer.py),
// from the cache's fp64 V, whose last column (ones) is not read: the denominator is the same sum.
//
// Every loop runs over a row's visible keys by their position in its visible list (Keys), which
// is the same for a draft row and for its autoregressive twin: a vector body and its scalar
// remainder then see the same keys in both.
//
// Build: python src/paraspec/model/csrc/build.py (with the W8A8 kernel).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

// exp for x <= 0 (scores minus their max), 16 lanes: 2^n * p(r) with x = n ln2 + r, |r| <= ln2/2,
// p a degree-7 Taylor polynomial (truncation ~5e-9 relative), n via scalef. Below -87.3 the result
// flushes to 0 as expf's would underflow.
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline float dot(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + d), _mm512_loadu_ps(b + d), acc);
  if (d < n) {
    const __mmask16 m = (__mmask16)((1u << (n - d)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + d), _mm512_maskz_loadu_ps(m, b + d), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// A row's visible keys in slot order: the committed ones [0, start), then its own new ones.
// Indexed, not materialised: the list would be rebuilt for every row, head and layer.
struct Keys {
  int64_t start;
  const std::vector<int64_t>& extra;
  int64_t size() const { return start + static_cast<int64_t>(extra.size()); }
  int64_t operator[](int64_t u) const { return u < start ? u : extra[u - start]; }
};

// One query row against one kv head, for the G query heads that share it (head size 64): each
// key's K and V row is loaded once for all G heads instead of once per head. Every head's
// instruction sequence is the one-head sequence (same dot, same exp over the same list, same
// fp64 accumulation order), so the result does not depend on G or on how heads are grouped.
template <int G>
void row_kv64(const float* q, const float* kb, const double* vb, const Keys& keys,
              float sc, std::vector<float>& s, float* out) {
  const int64_t nv = keys.size();
  s.resize(G * (nv + 16));
  __m512 qv[G][4];
  float mx[G];
  for (int g = 0; g < G; ++g) {
    for (int b = 0; b < 4; ++b) qv[g][b] = _mm512_loadu_ps(q + g * 64 + 16 * b);
    mx[g] = -INFINITY;
  }
  for (int64_t t = 0; t < nv; ++t) {
    const float* kr = kb + keys[t] * 64;
    const __m512 k0 = _mm512_loadu_ps(kr), k1 = _mm512_loadu_ps(kr + 16);
    const __m512 k2 = _mm512_loadu_ps(kr + 32), k3 = _mm512_loadu_ps(kr + 48);
    for (int g = 0; g < G; ++g) {
      __m512 a = _mm512_mul_ps(qv[g][0], k0);
      a = _mm512_fmadd_ps(qv[g][1], k1, a);
      a = _mm512_fmadd_ps(qv[g][2], k2, a);
      a = _mm512_fmadd_ps(qv[g][3], k3, a);
      const float x = _mm512_reduce_add_ps(a) * sc;
      s[g * (nv + 16) + t] = x;
      mx[g] = x > mx[g] ? x : mx[g];
    }
  }
  for (int g = 0; g < G; ++g) {
    float* sg = &s[g * (nv + 16)];
    const __m512 vmx = _mm512_set1_ps(mx[g]);
    int64_t t = 0;
    for (; t + 16 <= nv; t += 16) _mm512_storeu_ps(sg + t, exp16(_mm512_sub_ps(_mm512_loadu_ps(sg + t), vmx)));
    if (t < nv) {
      const __mmask16 m = (__mmask16)((1u << (nv - t)) - 1);
      _mm512_mask_storeu_ps(sg + t, m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sg + t), vmx)));
    }
  }
  __m512d acc[G][8];
  double den[G];
  for (int g = 0; g < G; ++g) {
    for (int b = 0; b < 8; ++b) acc[g][b] = _mm512_setzero_pd();
    den[g] = 0.0;
  }
  for (int64_t u = 0; u < nv; ++u) {
    const double* vr = vb + keys[u] * 65;
    __m512d vv[8];
    for (int b = 0; b < 8; ++b) vv[b] = _mm512_loadu_pd(vr + 8 * b);
    for (int g = 0; g < G; ++g) {
      const double e = static_cast<double>(s[g * (nv + 16) + u]);
      const __m512d ve = _mm512_set1_pd(e);
      for (int b = 0; b < 8; ++b) acc[g][b] = _mm512_fmadd_pd(ve, vv[b], acc[g][b]);
      den[g] += e;
    }
  }
  for (int g = 0; g < G; ++g) {
    const __m512d vd = _mm512_set1_pd(den[g]);
    for (int b = 0; b < 8; ++b)
      _mm256_storeu_ps(out + g * 64 + 8 * b, _mm512_cvtpd_ps(_mm512_div_pd(acc[g][b], vd)));
  }
}

}  // namespace

// q [n_q, n_heads, hd] fp32; k [n_kv, cap, hd] fp32 and v [n_kv, cap, hd + 1] fp64 (one layer);
// the new rows' keys sit at slots [start, start + n_q); visible [n_q, n_q] bool (row i sees new
// key j), or an empty tensor for a causal chain. Returns [n_q, n_heads * hd] fp32.
torch::Tensor attention(torch::Tensor q, torch::Tensor k, torch::Tensor v, int64_t start,
                        torch::Tensor visible, double scale) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == torch::kFloat && q.is_contiguous(), "q: [n_q, heads, hd] fp32");
  TORCH_CHECK(k.dim() == 3 && k.scalar_type() == torch::kFloat && k.is_contiguous(), "k: [kv, cap, hd] fp32");
  TORCH_CHECK(v.dim() == 3 && v.scalar_type() == torch::kDouble && v.is_contiguous(), "v: [kv, cap, hd+1] fp64");
  const int64_t n_q = q.size(0), n_heads = q.size(1), hd = q.size(2);
  const int64_t n_kv = k.size(0), cap = k.size(1);
  TORCH_CHECK(k.size(2) == hd && v.size(2) == hd + 1 && v.size(1) == cap && n_heads % n_kv == 0, "shapes");
  TORCH_CHECK(start >= 0 && start + n_q <= cap, "the new rows must fit in the cache");
  const bool causal = visible.numel() == 0;
  if (!causal) {
    TORCH_CHECK(visible.scalar_type() == torch::kBool && visible.size(0) == n_q && visible.size(1) == n_q,
                "visible: [n_q, n_q] bool");
    visible = visible.contiguous();
  }
  const int64_t group = n_heads / n_kv;
  // per row: the new slots it sees, in slot order (the committed ones, [0, start), all)
  std::vector<std::vector<int64_t>> extra(n_q);
  const bool* vis = causal ? nullptr : visible.data_ptr<bool>();
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t j = 0; j < n_q; ++j)
      if (causal ? j <= i : vis[i * n_q + j]) extra[i].push_back(start + j);

  auto out = torch::empty({n_q, n_heads * hd}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const double* vp = v.data_ptr<double>();
  float* op = out.data_ptr<float>();
  const float sc = static_cast<float>(scale);
  if (hd == 64) {   // per (row, kv head): the query heads sharing it, up to 4 at a time
    at::parallel_for(0, n_q * n_kv, 1, [&](int64_t begin, int64_t end) {
      std::vector<float> s;
      for (int64_t w = begin; w < end; ++w) {
        const int64_t i = w / n_kv, kv = w % n_kv;
        const Keys keys{start, extra[i]};
        const float* kb = kp + kv * cap * 64;
        const double* vb = vp + kv * cap * 65;
        for (int64_t g0 = 0; g0 < group; g0 += 4) {
          const int64_t h = kv * group + g0;
          const float* qr = qp + (i * n_heads + h) * 64;
          float* orow = op + i * n_heads * 64 + h * 64;
          switch (std::min<int64_t>(4, group - g0)) {
            case 1: row_kv64<1>(qr, kb, vb, keys, sc, s, orow); break;
            case 2: row_kv64<2>(qr, kb, vb, keys, sc, s, orow); break;
            case 3: row_kv64<3>(qr, kb, vb, keys, sc, s, orow); break;
            default: row_kv64<4>(qr, kb, vb, keys, sc, s, orow); break;
          }
        }
      }
    });
    return out;
  }
  at::parallel_for(0, n_q * n_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> s;
    std::vector<double> acc(hd);
    for (int64_t w = begin; w < end; ++w) {
      const int64_t i = w / n_heads, h = w % n_heads, kv = h / group;
      const Keys keys{start, extra[i]};
      const int64_t nv = keys.size();
      s.resize(nv + 16);
      const float* qr = qp + (i * n_heads + h) * hd;
      const float* kb = kp + kv * cap * hd;
      float mx = -INFINITY;
      for (int64_t t = 0; t < nv; ++t) {
        s[t] = dot(qr, kb + keys[t] * hd, hd) * sc;
        mx = s[t] > mx ? s[t] : mx;
      }
      const __m512 vmx = _mm512_set1_ps(mx);
      int64_t t = 0;
      for (; t + 16 <= nv; t += 16)
        _mm512_storeu_ps(&s[t], exp16(_mm512_sub_ps(_mm512_loadu_ps(&s[t]), vmx)));
      if (t < nv) {
        const __mmask16 m = (__mmask16)((1u << (nv - t)) - 1);
        _mm512_mask_storeu_ps(&s[t], m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, &s[t]), vmx)));
      }
      const double* vb = vp + kv * cap * (hd + 1);
      float* orow = op + i * n_heads * hd + h * hd;
      std::fill(acc.begin(), acc.end(), 0.0);
      double den = 0.0;
      for (int64_t u = 0; u < nv; ++u) {
        const double e = static_cast<double>(s[u]);
        const double* vr = vb + keys[u] * (hd + 1);
        const __m512d ve = _mm512_set1_pd(e);
        int64_t d = 0;
        for (; d + 8 <= hd; d += 8)
          _mm512_storeu_pd(&acc[d], _mm512_fmadd_pd(ve, _mm512_loadu_pd(vr + d), _mm512_loadu_pd(&acc[d])));
        for (; d < hd; ++d) acc[d] += e * vr[d];
        den += e;
      }
      for (int64_t d = 0; d < hd; ++d) orow[d] = static_cast<float>(acc[d] / den);
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.attr("VERSION") = 3;
  m.def("attention", &attention, "decode / draft-verify attention (row-invariant, fp64 sum)");
}
