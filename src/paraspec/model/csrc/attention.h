// Decode / draft-verify attention: one query row against the committed keys and the new keys
// its mask lets it see, for every row and head. Written once over isa_*.h's vector API; the
// tensor glue (checks, the visible lists, threads) is in kernels.cpp.
//
// Row invariance by construction: each (row, head) pair is computed by one fixed sequence of
// operations over its visible keys in slot order (masked keys are skipped, not added as zeros):
// per key a dot product, exp of the scores in fp32, and per output lane a fp64 sum over the keys
// in list order (V from the fp32 cache, widened to fp64 in registers: exact; the denominator, the
// sum of the weights, in the same order). A draft node therefore sees exactly the keys, in the same order,
// that the one-token autoregressive step at its position sees after the cache is compacted, and
// its output has the same bits, whatever the number of query rows or the gaps a tree leaves.
// What runs together (rows of a block sharing one pass over the committed keys, the heads of a
// kv head, tiles of pairs, chunks of keys, threads) decides only which pairs advance side by
// side, never a pair's sequence; elementwise steps (scores, exp) do not depend on the vector
// lane an element lands in.
//
// Every loop runs over a row's visible keys by their position in its visible list (Keys), which
// is the same for a draft row and for its autoregressive twin. Each step is a lane operation or
// hsum's fixed order, so the two modules (16 lanes in one zmm or two ymm) give the same bits.
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

// q . k over n floats, 16 lanes at a time, folded to 8 lanes (the first step of hsum).
inline __m256 dot_fold(const float* a, const float* b, int64_t n) {
  F16 acc = zero();
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) acc = fmadd(load(a + d), load(b + d), acc);
  if (d < n) acc = fmadd(loadn(a + d, n - d), loadn(b + d, n - d), acc);
  return fold(acc);
}

// s[p][t] = q_p . K[keys[t]] * sc for t in [t0, t1) and the pairs p = r * G + g of rows
// [0, nr) x G heads (query q + r * q_ld + g * hd). Keys go 8 at a time, each key's K row read
// from L1 for every pair, and 8 dot products are reduced together (sum8, the same additions
// as hsum's). N: the head size when it is known at compile time (64), else 0.
template <int64_t N>
void scores(const float* q, int64_t q_ld, int64_t nr, int64_t G, const float* kb, int64_t hd, float sc,
            int64_t t0, int64_t t1, const Keys& keys, float* s, int64_t ld) {
  const int64_t n = N ? N : hd;
  const __m256 vsc = _mm256_set1_ps(sc);
  int64_t t = t0;
  for (; t + 8 <= t1; t += 8) {
    const float* kr[8];
    for (int j = 0; j < 8; ++j) kr[j] = kb + keys[t + j] * n;
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t g = 0; g < G; ++g) {
        const float* qp = q + r * q_ld + g * n;
        __m256 f[8];
        for (int j = 0; j < 8; ++j) f[j] = dot_fold(qp, kr[j], n);
        _mm256_storeu_ps(s + (r * G + g) * ld + t, _mm256_mul_ps(sum8(f), vsc));
      }
  }
  for (; t < t1; ++t)
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t g = 0; g < G; ++g)
        s[(r * G + g) * ld + t] = hsum8(dot_fold(q + r * q_ld + g * n, kb + keys[t] * n, n)) * sc;
}

// e[:nv] = exp(s[:nv] - max(s[:nv])), computed in fp32 and stored in fp64 for the V sums
inline void softmax_numerators(float* s, int64_t nv, double* e) {
  F16 m = set1(-INFINITY);
  int64_t t = 0;
  for (; t + 16 <= nv; t += 16) m = max(m, load(s + t));
  float mx = reduce_max(m);
  for (; t < nv; ++t) mx = s[t] > mx ? s[t] : mx;  // the max is exact in any order
  const F16 vmx = set1(mx);
  for (t = 0; t + 16 <= nv; t += 16) store(s + t, exp16(sub(load(s + t), vmx)));
  if (t < nv) storen(s + t, exp16(sub(loadn(s + t, nv - t), vmx)), nv - t);
  for (t = 0; t < nv; ++t) e[t] = static_cast<double>(s[t]);
}

inline D8 load_v(const float* p) { return load_wide(p); }  // 8 lanes of a V row in fp64 (exact)
inline D8 load_v(const double* p) { return load(p); }

// sum[p][d] += sum_{u in [u0, u1)} e[p][u] V[keys[u]][d] for T (row, head) pairs and the lanes
// d of n slices of 8 * B doubles from d0, each lane's terms added in u order (fp64); pair p's
// sums are the row sum + p * (hd + 1), whose last element is the softmax denominator, the sum
// of e[p][u] in u order, accumulated here when `Den` (in all 8 lanes of a vector: the same
// additions). T * B accumulators stay in registers while the chunk's V rows (in L1) pass once
// per slice. V row of slot i: vb + (i - row0) * hd (fp32 from the cache, or fp64 widened rows).
template <int T, int B, bool Den, bool Committed, typename VT>
void v_sum(const double* e, int64_t ld, const VT* vb, int64_t row0, int64_t hd, const Keys& keys, int64_t u0,
           int64_t u1, double* sum, int64_t d0, int64_t n) {
  for (int64_t d = d0; d < d0 + 8 * B * n; d += 8 * B) {
    const bool den = Den && d == d0;
    D8 acc[T][B], dn[T];
    for (int p = 0; p < T; ++p) {
      for (int b = 0; b < B; ++b) acc[p][b] = load(sum + p * (hd + 1) + d + 8 * b);
      dn[p] = set1(sum[p * (hd + 1) + hd]);
    }
    for (int64_t u = u0; u < u1; ++u) {
      const VT* vr = vb + ((Committed ? u : keys[u]) - row0) * hd + d;  // committed: slot u
      D8 vv[B];
      for (int b = 0; b < B; ++b) vv[b] = load_v(vr + 8 * b);
      for (int p = 0; p < T; ++p) {
        const D8 ve = set1(e[p * ld + u]);
        for (int b = 0; b < B; ++b) acc[p][b] = fmadd(ve, vv[b], acc[p][b]);
        if (den) dn[p] = add(dn[p], ve);
      }
    }
    for (int p = 0; p < T; ++p) {
      for (int b = 0; b < B; ++b) store(sum + p * (hd + 1) + d + 8 * b, acc[p][b]);
      if (den) sum[p * (hd + 1) + hd] = lane0(dn[p]);
    }
  }
}

template <int T, bool C, typename VT>
void v_sum_tile(const double* e, int64_t ld, const VT* vb, int64_t row0, int64_t hd, const Keys& keys, int64_t u0,
                int64_t u1, double* sum) {
  constexpr int B = T * 8 <= kVAcc ? 8 : T * 4 <= kVAcc ? 4 : T * 2 <= kVAcc ? 2 : 1;  // blocks per slice
  const int64_t full = hd / (8 * B), rest = hd % (8 * B) / 8;
  if (full) v_sum<T, B, true, C>(e, ld, vb, row0, hd, keys, u0, u1, sum, 0, full);
  if (rest) {
    if (full) v_sum<T, 1, false, C>(e, ld, vb, row0, hd, keys, u0, u1, sum, 8 * B * full, rest);
    else v_sum<T, 1, true, C>(e, ld, vb, row0, hd, keys, u0, u1, sum, 0, rest);
  }
  if (hd % 8 == 0 && hd) return;
  // the lanes past the last block of 8 (and the denominator if no block took it), one u at a time
  for (int64_t u = u0; u < u1; ++u) {
    const VT* vr = vb + (keys[u] - row0) * hd;
    for (int p = 0; p < T; ++p) {
      const double eu = e[p * ld + u];
      for (int64_t d = hd / 8 * 8; d < hd; ++d) sum[p * (hd + 1) + d] += eu * static_cast<double>(vr[d]);
      if (hd < 8) sum[p * (hd + 1) + hd] += eu;
    }
  }
}

// v_sum_tile for T <= kVPairs pairs chosen at run time. C: the keys are committed ones (key u
// in slot u), so the V row address needs no lookup.
template <bool C, typename VT>
void v_sum_tile_n(int64_t T, const double* e, int64_t ld, const VT* vb, int64_t row0, int64_t hd, const Keys& keys,
                  int64_t u0, int64_t u1, double* sum) {
  static_assert(kVPairs >= 1 && kVPairs <= 3);
  switch (T) {
    case 1: v_sum_tile<1, C>(e, ld, vb, row0, hd, keys, u0, u1, sum); break;
    case 2: v_sum_tile<std::min(2, kVPairs), C>(e, ld, vb, row0, hd, keys, u0, u1, sum); break;
    default: v_sum_tile<kVPairs, C>(e, ld, vb, row0, hd, keys, u0, u1, sum); break;
  }
}

// V rows per chunk of v_sum_pairs (~24 KB of them in fp64), and the scratch it needs (doubles).
inline int64_t v_chunk(int64_t hd) { return std::max<int64_t>(8, 24 * 1024 / (8 * hd)); }
inline int64_t v_scratch(int64_t hd) { return v_chunk(hd) * hd; }

// Pairs [0, P) over keys [u0, u1) of one list, in chunks of V rows that stay in L1 while every
// tile of pairs passes (so V leaves memory once for all the pairs, not once per pair). With more
// than one tile, a chunk of committed keys (contiguous slots) is first widened to fp64 in vw
// (v_scratch(hd) doubles), once for all tiles; else the tile widens V as it reads it. The same
// fp64 values either way: only the speed differs.
inline void v_sum_pairs(const double* e, int64_t ld, int64_t P, const float* vb, int64_t hd, const Keys& keys,
                        int64_t u0, int64_t u1, double* sum, double* vw) {
  const int64_t chunk = v_chunk(hd);
  for (int64_t c0 = u0; c0 < u1; c0 += chunk) {
    const int64_t c1 = std::min(c0 + chunk, u1);
    const bool committed = c1 <= keys.start;
    if (P > kVPairs && committed) {
      const int64_t n = (c1 - c0) * hd;  // rows c0..c1 are contiguous
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) store(vw + i, load_wide(vb + c0 * hd + i));
      for (; i < n; ++i) vw[i] = static_cast<double>(vb[c0 * hd + i]);
      for (int64_t p = 0; p < P; p += kVPairs)
        v_sum_tile_n<true>(std::min<int64_t>(kVPairs, P - p), e + p * ld, ld, static_cast<const double*>(vw), c0, hd,
                           keys, c0, c1, sum + p * (hd + 1));
      continue;
    }
    for (int64_t p = 0; p < P; p += kVPairs)
      (committed ? v_sum_tile_n<true, float> : v_sum_tile_n<false, float>)(
          std::min<int64_t>(kVPairs, P - p), e + p * ld, ld, vb, 0, hd, keys, c0, c1, sum + p * (hd + 1));
  }
}

// Rows [0, nr) of a block against one kv head, for the G query heads sharing it: P = nr * G
// (row, head) pairs, pair p = r * G + g with query q + r * q_ld + g * hd and output
// out + r * out_ld + g * hd; keys[r] is row r's visible list. The committed keys, which every
// row sees in the same places of its list, are walked once for all pairs (each K and V row is
// loaded once per block instead of once per row and head); each row's own new keys after them.
// Every pair's instruction sequence is the one-pair sequence (same dot per key, same exp over
// the same list, same fp64 accumulation order per lane), so the result does not depend on the
// block, G, or the other rows. Scratch: s P * ld floats and e P * ld doubles (ld >= longest
// list + 16), sum P * (hd + 1) doubles, vw v_scratch(hd) doubles.
inline void attend_block(const float* q, int64_t q_ld, int64_t nr, int64_t G, const float* kb, const float* vb,
                         int64_t hd, const Keys* keys, float sc, float* s, double* e, int64_t ld, double* sum,
                         double* vw, float* out, int64_t out_ld) {
  const int64_t P = nr * G, start = keys[0].start;
  const auto score = hd == 64 ? scores<64> : scores<0>;
  score(q, q_ld, nr, G, kb, hd, sc, 0, start, keys[0], s, ld);
  for (int64_t r = 0; r < nr; ++r)
    score(q + r * q_ld, q_ld, 1, G, kb, hd, sc, start, keys[r].size(), keys[r], s + r * G * ld, ld);
  for (int64_t p = 0; p < P; ++p) softmax_numerators(s + p * ld, keys[p / G].size(), e + p * ld);
  std::fill(sum, sum + P * (hd + 1), 0.0);
  v_sum_pairs(e, ld, P, vb, hd, keys[0], 0, start, sum, vw);
  for (int64_t r = 0; r < nr; ++r)
    v_sum_pairs(e + r * G * ld, ld, G, vb, hd, keys[r], start, keys[r].size(), sum + r * G * (hd + 1), vw);
  for (int64_t p = 0; p < P; ++p) {
    float* o = out + p / G * out_ld + p % G * hd;
    const double* sp = sum + p * (hd + 1);
    const double den = sp[hd];
    int64_t d = 0;
    for (; d + 8 <= hd; d += 8) store_float(o + d, div(load(sp + d), set1(den)));
    for (; d < hd; ++d) o[d] = static_cast<float>(sp[d] / den);
  }
}

}  // namespace isa
