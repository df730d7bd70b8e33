// Decode / draft-verify attention: one query row against the committed keys and the new keys
// its mask lets it see, for every row and head. Written once over isa_*.h's vector API; the
// tensor glue (checks, the visible lists, threads) is in kernels.cpp.
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
// is the same for a draft row and for its autoregressive twin: a vector body and its remainder
// then see the same keys in both. Each output lane is one fixed sequence of lane operations, so
// the two modules (16 lanes in one zmm or two ymm) give the same bits too.
namespace isa {

// A row's visible keys in slot order: the committed ones [0, start), then its own new ones.
// Indexed, not materialised: the list would be rebuilt for every row, head and layer.
struct Keys {
  int64_t start;
  const int64_t* extra;
  int64_t n_extra;
  int64_t size() const { return start + n_extra; }
  int64_t operator[](int64_t u) const { return u < start ? u : extra[u - start]; }
};

inline float dot(const float* a, const float* b, int64_t n) {
  F16 acc = zero();
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) acc = fmadd(load(a + d), load(b + d), acc);
  if (d < n) acc = fmadd(loadn(a + d, n - d), loadn(b + d, n - d), acc);
  return hsum(acc);
}

// s[:nv] = exp(s[:nv] - mx)
inline void exp_shifted(float* s, int64_t nv, float mx) {
  const F16 vmx = set1(mx);
  int64_t t = 0;
  for (; t + 16 <= nv; t += 16) store(s + t, exp16(sub(load(s + t), vmx)));
  if (t < nv) storen(s + t, exp16(sub(loadn(s + t, nv - t), vmx)), nv - t);
}

// out[g][:64] = sum_u e[g][u] V[keys[u]][:64] / sum_u e[g][u], for G heads, in fp64. Each
// lane's sum runs over u in order whatever the tiling, so the tiling is free to fit the
// registers: B of a head's 8 blocks of 8 doubles at a time (G * B accumulators), over keys
// in chunks that stay in L1 while all blocks pass.
template <int G, int B>
void weighted_v64(const float* s, int64_t ld, const double* vb, const Keys& keys, float* out) {
  constexpr int64_t kKeyChunk = 48;  // 48 V rows: 25 KB
  const int64_t nv = keys.size();
  alignas(64) double sum[G][64] = {};
  double den[G] = {};
  for (int g = 0; g < G; ++g)
    for (int64_t u = 0; u < nv; ++u) den[g] += static_cast<double>(s[g * ld + u]);
  for (int64_t u0 = 0; u0 < nv; u0 += kKeyChunk) {
    const int64_t u1 = std::min(u0 + kKeyChunk, nv);
    for (int d0 = 0; d0 < 64; d0 += 8 * B) {
      D8 acc[G][B];
      for (int g = 0; g < G; ++g)
        for (int b = 0; b < B; ++b) acc[g][b] = load(&sum[g][d0 + 8 * b]);
      for (int64_t u = u0; u < u1; ++u) {
        const double* vr = vb + keys[u] * 65 + d0;
        D8 vv[B];
        for (int b = 0; b < B; ++b) vv[b] = load(vr + 8 * b);
        for (int g = 0; g < G; ++g) {
          const D8 e = set1(static_cast<double>(s[g * ld + u]));
          for (int b = 0; b < B; ++b) acc[g][b] = fmadd(e, vv[b], acc[g][b]);
        }
      }
      for (int g = 0; g < G; ++g)
        for (int b = 0; b < B; ++b) store(&sum[g][d0 + 8 * b], acc[g][b]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int b = 0; b < 8; ++b) store_float(out + g * 64 + 8 * b, div(load(&sum[g][8 * b]), set1(den[g])));
}

// One query row against one kv head, for the G query heads that share it (head size 64): each
// key's K and V row is loaded once for all G heads instead of once per head. Every head's
// instruction sequence is the one-head sequence (same dot, same exp over the same list, same
// fp64 accumulation order), so the result does not depend on G or on how heads are grouped.
// s: G * (nv + 16) floats of scratch.
template <int G>
void row_kv64(const float* q, const float* kb, const double* vb, const Keys& keys, float sc, float* s,
              float* out) {
  const int64_t nv = keys.size(), ld = nv + 16;
  F16 qv[G][4];
  float mx[G];
  for (int g = 0; g < G; ++g) {
    for (int b = 0; b < 4; ++b) qv[g][b] = load(q + g * 64 + 16 * b);
    mx[g] = -INFINITY;
  }
  for (int64_t t = 0; t < nv; ++t) {
    const float* kr = kb + keys[t] * 64;
    const F16 k0 = load(kr), k1 = load(kr + 16), k2 = load(kr + 32), k3 = load(kr + 48);
    for (int g = 0; g < G; ++g) {
      F16 a = mul(qv[g][0], k0);
      a = fmadd(qv[g][1], k1, a);
      a = fmadd(qv[g][2], k2, a);
      a = fmadd(qv[g][3], k3, a);
      const float x = hsum(a) * sc;
      s[g * ld + t] = x;
      mx[g] = x > mx[g] ? x : mx[g];
    }
  }
  for (int g = 0; g < G; ++g) exp_shifted(s + g * ld, nv, mx[g]);
  constexpr int B = G * 8 <= kAccD8 ? 8 : G * 4 <= kAccD8 ? 4 : G * 2 <= kAccD8 ? 2 : 1;
  weighted_v64<G, B>(s, ld, vb, keys, out);
}

// Query heads h0 .. h0 + G - 1 (G <= 4, sharing one kv head) of one row, head size 64.
inline void attend_kv64(int G, const float* q, const float* kb, const double* vb, const Keys& keys, float sc,
                        float* s, float* out) {
  switch (G) {
    case 1: row_kv64<1>(q, kb, vb, keys, sc, s, out); break;
    case 2: row_kv64<2>(q, kb, vb, keys, sc, s, out); break;
    case 3: row_kv64<3>(q, kb, vb, keys, sc, s, out); break;
    default: row_kv64<4>(q, kb, vb, keys, sc, s, out); break;
  }
}

// One (row, head) of any head size hd. s: nv + 16 floats, acc: hd doubles of scratch.
inline void attend_head(const float* q, const float* kb, const double* vb, int64_t hd, const Keys& keys,
                        float sc, float* s, double* acc, float* out) {
  const int64_t nv = keys.size();
  float mx = -INFINITY;
  for (int64_t t = 0; t < nv; ++t) {
    s[t] = dot(q, kb + keys[t] * hd, hd) * sc;
    mx = s[t] > mx ? s[t] : mx;
  }
  exp_shifted(s, nv, mx);
  std::fill(acc, acc + hd, 0.0);
  double den = 0.0;
  for (int64_t u = 0; u < nv; ++u) {
    const double e = static_cast<double>(s[u]);
    const double* vr = vb + keys[u] * (hd + 1);
    const D8 ve = set1(e);
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) store(acc + d, fmadd(ve, load(vr + d), load(acc + d)));
    for (; d < hd; ++d) acc[d] += e * vr[d];
    den += e;
  }
  for (int64_t d = 0; d < hd; ++d) out[d] = static_cast<float>(acc[d] / den);
}

}  // namespace isa
