// Decode / draft-verify attention: one query row against the committed keys and the new keys
// its mask lets it see, for every row and head. Written once over isa_*.h's vector API; the
// tensor glue (checks, the visible lists, threads) is in kernels.cpp.
//
// Row invariance by construction: each (row, head) pair is computed by one fixed sequence of
// operations over its visible keys in slot order (masked keys are skipped, not added as zeros):
// per key a dot product, exp of the scores, and per output lane one fp32 fma per key in list
// order; the denominator, the sum of the weights, in an order fixed by the list's length (lane
// j of a vector takes keys j, j + 16, ...). The order, not the precision, is what makes it
// exact: a draft node sees exactly the keys, in the same order, that the one-token
// autoregressive step at its position sees after the cache is compacted, so its output has the
// same bits, whatever the number of query rows or the gaps a tree leaves.
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

// e[:nv] = exp(s[:nv] - max(s[:nv])) in place, in fp32; returns their sum, the softmax
// denominator, taken in a fixed order for a list of nv keys: lane j of a vector adds the
// weights of keys j, j + 16, ... in list order, then hsum's order over the lanes.
inline float softmax_numerators(float* s, int64_t nv) {
  F16 m = set1(-INFINITY);
  int64_t t = 0;
  for (; t + 16 <= nv; t += 16) m = max(m, load(s + t));
  float mx = reduce_max(m);
  for (; t < nv; ++t) mx = s[t] > mx ? s[t] : mx;  // the max is exact in any order
  const F16 vmx = set1(mx);
  F16 den = zero();
  for (t = 0; t + 16 <= nv; t += 16) {
    const F16 x = exp16(sub(load(s + t), vmx));
    store(s + t, x);
    den = add(den, x);
  }
  if (t < nv) {
    storen(s + t, exp16(sub(loadn(s + t, nv - t), vmx)), nv - t);
    den = add(den, loadn(s + t, nv - t));  // the lanes past nv add +0 (exact)
  }
  return hsum(den);
}

// sum[p][d] += sum_{u in [u0, u1)} e[p][u] V[keys[u]][d] for T (row, head) pairs and the lanes
// d of n slices of 16 * B floats from d0 (or, with Part, of the last hd - d0 < 16 lanes, masked),
// each lane's terms added in u order by one fp32 fma each; pair p's sums are the row
// sum + p * hd. T * B accumulators stay in registers while the chunk's V rows (in L1) pass
// once per slice. C: the keys are committed ones (key u in slot u), so the V row needs no lookup.
template <int T, int B, bool C, bool Part = false>
void v_sum(const float* e, int64_t ld, const float* vb, int64_t hd, const Keys& keys, int64_t u0, int64_t u1,
           float* sum, int64_t d0, int64_t n) {
  const int64_t w = hd - d0;  // Part: the lanes left
  for (int64_t d = d0; d < d0 + 16 * B * n; d += 16 * B) {
    F16 acc[T][B];
    for (int p = 0; p < T; ++p)
      for (int b = 0; b < B; ++b)
        acc[p][b] = Part ? loadn(sum + p * hd + d, w) : load(sum + p * hd + d + 16 * b);
    for (int64_t u = u0; u < u1; ++u) {
      const float* vr = vb + (C ? u : keys[u]) * hd + d;
      F16 vv[B];
      for (int b = 0; b < B; ++b) vv[b] = Part ? loadn(vr, w) : load(vr + 16 * b);
      for (int p = 0; p < T; ++p) {
        const F16 ve = set1(e[p * ld + u]);
        for (int b = 0; b < B; ++b) acc[p][b] = fmadd(ve, vv[b], acc[p][b]);
      }
    }
    for (int p = 0; p < T; ++p)
      for (int b = 0; b < B; ++b) {
        if (Part) storen(sum + p * hd + d, acc[p][b], w);
        else store(sum + p * hd + d + 16 * b, acc[p][b]);
      }
  }
}

template <int T, bool C>
void v_sum_tile(const float* e, int64_t ld, const float* vb, int64_t hd, const Keys& keys, int64_t u0, int64_t u1,
                float* sum) {
  constexpr int B = T * 4 <= kVAcc ? 4 : T * 2 <= kVAcc ? 2 : 1;  // vectors per slice
  const int64_t full = hd / (16 * B), rest = hd % (16 * B) / 16;
  if (full) v_sum<T, B, C>(e, ld, vb, hd, keys, u0, u1, sum, 0, full);
  if (rest) v_sum<T, 1, C>(e, ld, vb, hd, keys, u0, u1, sum, 16 * B * full, rest);
  if (hd % 16) v_sum<T, 1, C, true>(e, ld, vb, hd, keys, u0, u1, sum, hd / 16 * 16, 1);
}

// v_sum_tile for T <= kVPairs pairs chosen at run time
template <bool C>
void v_sum_tile_n(int64_t T, const float* e, int64_t ld, const float* vb, int64_t hd, const Keys& keys, int64_t u0,
                  int64_t u1, float* sum) {
  static_assert(kVPairs >= 1 && kVPairs <= 4);
  switch (T) {
    case 1: v_sum_tile<1, C>(e, ld, vb, hd, keys, u0, u1, sum); break;
    case 2: v_sum_tile<std::min(2, kVPairs), C>(e, ld, vb, hd, keys, u0, u1, sum); break;
    case 3: v_sum_tile<std::min(3, kVPairs), C>(e, ld, vb, hd, keys, u0, u1, sum); break;
    default: v_sum_tile<kVPairs, C>(e, ld, vb, hd, keys, u0, u1, sum); break;
  }
}

// Pairs [0, P) over keys [u0, u1) of one list, in chunks of V rows (~24 KB) that stay in L1
// while every tile of pairs passes, so V leaves memory once for all the pairs, not once per pair.
inline void v_sum_pairs(const float* e, int64_t ld, int64_t P, const float* vb, int64_t hd, const Keys& keys,
                        int64_t u0, int64_t u1, float* sum) {
  const int64_t chunk = std::max<int64_t>(16, 24 * 1024 / (4 * hd));
  for (int64_t c0 = u0; c0 < u1; c0 += chunk) {
    const int64_t c1 = std::min(c0 + chunk, u1);
    const auto tile = c1 <= keys.start ? v_sum_tile_n<true> : v_sum_tile_n<false>;
    for (int64_t p = 0; p < P; p += kVPairs)
      tile(std::min<int64_t>(kVPairs, P - p), e + p * ld, ld, vb, hd, keys, c0, c1, sum + p * hd);
  }
}

// Rows [0, nr) of a block against one kv head, for the G query heads sharing it: P = nr * G
// (row, head) pairs, pair p = r * G + g with query q + r * q_ld + g * hd and output
// out + r * out_ld + g * hd; keys[r] is row r's visible list. The committed keys, which every
// row sees in the same places of its list, are walked once for all pairs (each K and V row is
// loaded once per block instead of once per row and head); each row's own new keys after them.
// Every pair's instruction sequence is the one-pair sequence (same dot per key, same exp and
// denominator over the same list, same fp32 accumulation order per lane), so the result does
// not depend on the block, G, or the other rows. Scratch: s P * ld floats (ld >= longest
// list + 16), sum P * (hd + 1) floats.
inline void attend_block(const float* q, int64_t q_ld, int64_t nr, int64_t G, const float* kb, const float* vb,
                         int64_t hd, const Keys* keys, float sc, float* s, int64_t ld, float* sum, float* out,
                         int64_t out_ld) {
  const int64_t P = nr * G, start = keys[0].start;
  const auto score = hd == 64 ? scores<64> : scores<0>;
  score(q, q_ld, nr, G, kb, hd, sc, 0, start, keys[0], s, ld);
  for (int64_t r = 0; r < nr; ++r)
    score(q + r * q_ld, q_ld, 1, G, kb, hd, sc, start, keys[r].size(), keys[r], s + r * G * ld, ld);
  float* den = sum + P * hd;
  for (int64_t p = 0; p < P; ++p) den[p] = softmax_numerators(s + p * ld, keys[p / G].size());
  std::fill(sum, sum + P * hd, 0.0f);
  v_sum_pairs(s, ld, P, vb, hd, keys[0], 0, start, sum);
  for (int64_t r = 0; r < nr; ++r)
    v_sum_pairs(s + r * G * ld, ld, G, vb, hd, keys[r], start, keys[r].size(), sum + r * G * hd);
  for (int64_t p = 0; p < P; ++p) {
    float* o = out + p / G * out_ld + p % G * hd;
    const float* sp = sum + p * hd;
    const F16 vden = set1(den[p]);
    int64_t d = 0;
    for (; d + 16 <= hd; d += 16) store(o + d, div(load(sp + d), vden));
    for (; d < hd; ++d) o[d] = sp[d] / den[p];
  }
}

}  // namespace isa
