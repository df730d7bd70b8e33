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
// The dot product's sequence can be run two ways with the same bits: a key's K row in the lanes
// (scores: fold, then sum8 across keys) or, where many pairs share a K block, 16 keys in the
// lanes of a transposed block (scores_keys); which one runs is a matter of speed only.
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

// The cache's K and V elements: fp32, or fp16 (Half) read as fp32. The widening is exact, so
// every sum below runs on the same fp32 values whichever way a row reaches them: an fp16 cache
// changes the numbers (each K and V element is rounded once, when it is written), never a row's
// operation order, so row invariance holds for both.
struct Half { uint16_t bits; };
inline F16 kv_load(const float* p) { return load(p); }
inline F16 kv_load(const Half* p) { return load_half(reinterpret_cast<const uint16_t*>(p)); }
inline F16 kv_loadn(const float* p, int64_t n) { return loadn(p, n); }
inline F16 kv_loadn(const Half* p, int64_t n) {  // lanes past n read +0, as loadn's
  alignas(32) uint16_t h[16] = {};
  std::memcpy(h, p, n * sizeof(uint16_t));
  return load_half(h);
}
// n floats into the cache's elements (fp16: rounded to nearest even, as torch's .half() rounds)
inline void kv_store(const float* x, float* y, int64_t n) { std::memcpy(y, x, n * sizeof(float)); }
inline void kv_store(const float* x, Half* y, int64_t n) {
  uint16_t* h = reinterpret_cast<uint16_t*>(y);
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) store_half(h + d, load(x + d));
  if (d < n) {
    alignas(32) uint16_t t[16];
    store_half(t, loadn(x + d, n - d));
    std::memcpy(h + d, t, (n - d) * sizeof(uint16_t));
  }
}

// q . k over n floats, 16 lanes at a time, folded to 8 lanes (the first step of hsum).
template <typename KV>
inline __m256 dot_fold(const float* a, const KV* b, int64_t n) {
  F16 acc = zero();
  int64_t d = 0;
  for (; d + 16 <= n; d += 16) acc = fmadd(load(a + d), kv_load(b + d), acc);
  if (d < n) acc = fmadd(loadn(a + d, n - d), kv_loadn(b + d, n - d), acc);
  return fold(acc);
}

// Asks for the n floats from p (one prefetch per cache line) in L2: the K and V rows a pass will
// read next, while this one computes (faster with K and V streamed from memory, as in a forward:
// docs/design-notes.md).
template <typename KV>
inline void prefetch_rows(const KV* p, int64_t n) {
  const char* c = reinterpret_cast<const char*>(p);
  for (int64_t b = 0; b < n * int64_t(sizeof(KV)); b += 64) _mm_prefetch(c + b, _MM_HINT_T1);
}

// s[p][t] = q_p . K[keys[t]] * sc for t in [t0, t1) and the pairs p = r * G + g of rows
// [0, nr) x G heads (query q + r * q_ld + g * hd). Keys go 8 at a time, each key's K row read
// from L1 for every pair, and 8 dot products are reduced together (sum8, the same additions
// as hsum's). N: the head size when it is known at compile time (64), else 0. (Neither sum16
// for 16 keys nor prefetching V here was faster for one row, with K and V streamed: measured.)
template <int64_t N, typename KV>
void scores(const float* q, int64_t q_ld, int64_t nr, int64_t G, const KV* kb, int64_t hd, float sc,
            int64_t t0, int64_t t1, const Keys& keys, float* s, int64_t ld) {
  const int64_t n = N ? N : hd;
  const __m256 vsc = _mm256_set1_ps(sc);
  int64_t t = t0;
  for (; t + 8 <= t1; t += 8) {
    const KV* kr[8];
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

// scores_tile's steps (inlined: each array of vectors must stay in registers): the accumulators of
// T pairs x B blocks of 16 keys, and the steps of hsum8(fold)'s tree that build them up.
template <int T, int B>
using Tile = F16[T][B];

template <int T, int B, int NS>
[[gnu::always_inline]] inline void lane_chain(const float* const* q, const float* kt, int l, Tile<T, B>& a) {
  for (int p = 0; p < T; ++p)
    for (int b = 0; b < B; ++b) a[p][b] = zero();
  for (int i = 0; i < NS; ++i) {
    const int d = l + 16 * i;
    F16 k[B];
    for (int b = 0; b < B; ++b) k[b] = load_reg(kt + (b * 16 * NS + d) * 16);
    for (int p = 0; p < T; ++p) {
      const F16 x = set1(q[p][d]);
      for (int b = 0; b < B; ++b) a[p][b] = fmadd(x, k[b], a[p][b]);
    }
  }
}
template <int T, int B>
[[gnu::always_inline]] inline void add_to(Tile<T, B>& a, const Tile<T, B>& x) {
  for (int p = 0; p < T; ++p)
    for (int b = 0; b < B; ++b) a[p][b] = add(a[p][b], x[p][b]);
}
template <int T, int B, int NS>  // fold's lane l (< 8): lanes l + 8 and l
[[gnu::always_inline]] inline void lane_fold(const float* const* q, const float* kt, int l, Tile<T, B>& t) {
  Tile<T, B> x;
  lane_chain<T, B, NS>(q, kt, l + 8, t), lane_chain<T, B, NS>(q, kt, l, x), add_to<T, B>(t, x);
}
template <int T, int B, int NS>  // hsum8's u[l] (l < 4): fold's lanes l + 4 and l
[[gnu::always_inline]] inline void lane_quarter(const float* const* q, const float* kt, int l, Tile<T, B>& u) {
  Tile<T, B> x;
  lane_fold<T, B, NS>(q, kt, l + 4, u), lane_fold<T, B, NS>(q, kt, l, x), add_to<T, B>(u, x);
}

// scores' dot products with the keys in lanes, for T pairs and B blocks of 16 keys: kt holds the
// blocks' K rows transposed (block b, dimension d: kt + (b * 16 * NS + d) * 16, NS = hd / 16
// slices). Lane j runs what lane l of dot_fold's accumulator runs, for every l, as a vector
// chain of its own (q[l + 16 i] k[l + 16 i], one fma each from zero, i = 0 .. NS - 1), then adds
// the 16 chains in hsum8(fold)'s tree: the same operations on the same values as scores' sum8,
// so the same bits, without its fold and shuffles per pair and key. The score is scaled as there.
template <int T, int B, int NS>
void scores_tile(const float* const* q, const float* kt, F16 vsc, float* const* s) {
  Tile<T, B> w0, w1, x;
  lane_quarter<T, B, NS>(q, kt, 0, w0), lane_quarter<T, B, NS>(q, kt, 2, x), add_to<T, B>(w0, x);  // u0 + u2
  lane_quarter<T, B, NS>(q, kt, 1, w1), lane_quarter<T, B, NS>(q, kt, 3, x), add_to<T, B>(w1, x);  // u1 + u3
  add_to<T, B>(w0, w1);
  for (int p = 0; p < T; ++p)
    for (int b = 0; b < B; ++b) store(s[p] + 16 * b, mul(w0[p][b], vsc));
}

// scores_tile for the pairs [0, P) (pair p = r * G + g) over the transposed blocks in kt, whose
// first key is t: T pairs at a time, the last few one by one; the n0 and n1 floats from pf0 and
// pf1 are prefetched a share per tile (a burst of prefetches would stall on the line buffers).
template <int T, int B, int NS, typename KV>
void scores_pairs(const float* q, int64_t q_ld, int64_t P, int64_t G, const float* kt, F16 vsc, int64_t t,
                  float* s, int64_t ld, const KV* pf0, int64_t n0, const KV* pf1, int64_t n1) {
  const float* qp[T];
  float* sp[T];
  const int64_t tiles = (P + T - 1) / T, per0 = (n0 + tiles - 1) / tiles, per1 = (n1 + tiles - 1) / tiles;
  for (int64_t p0 = 0; p0 < P; p0 += T) {
    if (n0 > 0) prefetch_rows(pf0, std::min(per0, n0)), pf0 += per0, n0 -= per0;
    if (n1 > 0) prefetch_rows(pf1, std::min(per1, n1)), pf1 += per1, n1 -= per1;
    const int64_t n = std::min<int64_t>(T, P - p0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = p0 + i;
      qp[i] = q + p / G * q_ld + p % G * 16 * NS, sp[i] = s + p * ld + t;
    }
    if (n == T) scores_tile<T, B, NS>(qp, kt, vsc, sp);
    else
      for (int64_t i = 0; i < n; ++i) scores_tile<1, B, NS>(qp + i, kt, vsc, sp + i);
  }
}

// scores of the pairs [0, P) for the committed keys [0, t1) with the keys in lanes: each block of
// 16 K rows is transposed once for all P pairs (worth it from kLanePairs pairs), B blocks at a
// time; hd = 16 NS. The same bits as scores (scores_tile), which takes the keys past the last
// whole block. While a group's pairs run, the next group's K rows and this group's V rows (pv)
// are prefetched.
template <int T, int B, int NS, typename KV>
void scores_keys(const float* q, int64_t q_ld, int64_t P, int64_t G, const KV* kb, float sc, int64_t t1,
                 float* s, int64_t ld, const KV* pv) {
  constexpr int64_t ns = NS, hd = 16 * NS;
  alignas(64) float kt[B * 16 * NS * 16];
  const F16 vsc = set1(sc);
  const auto transpose = [&](int64_t t, int b) {  // keys [t, t + 16) into block b
    for (int64_t i = 0; i < ns; ++i) {
      F16 r[16];
      for (int j = 0; j < 16; ++j) r[j] = kv_load(kb + (t + j) * hd + 16 * i);
      transpose16(r);
      for (int j = 0; j < 16; ++j) store(kt + (b * 16 * ns + 16 * i + j) * 16, r[j]);
    }
  };
  int64_t t = 0;
  for (; t + 16 * B <= t1; t += 16 * B) {
    for (int b = 0; b < B; ++b) transpose(t + 16 * b, b);
    const int64_t next = std::min<int64_t>(16 * B, (t1 - t - 16 * B) / 16 * 16);  // whole blocks ahead
    scores_pairs<T, B, NS>(q, q_ld, P, G, kt, vsc, t, s, ld, kb + (t + 16 * B) * hd, next * hd,
                           pv ? pv + t * hd : nullptr, pv ? 16 * B * hd : 0);
  }
  for (; t + 16 <= t1; t += 16) {
    transpose(t, 0);
    scores_pairs<T, 1, NS>(q, q_ld, P, G, kt, vsc, t, s, ld, static_cast<const KV*>(nullptr), 0,
                           pv ? pv + t * hd : nullptr, pv ? 16 * hd : 0);
  }
  const Keys committed{t1, nullptr, 0};
  scores<0>(q, q_ld, P / G, G, kb, hd, sc, t, t1, committed, s, ld);
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
template <int T, int B, bool C, bool Part = false, typename KV>
void v_sum(const float* e, int64_t ld, const KV* vb, int64_t hd, const Keys& keys, int64_t u0, int64_t u1,
           float* sum, int64_t d0, int64_t n) {
  const int64_t w = hd - d0;  // Part: the lanes left
  for (int64_t d = d0; d < d0 + 16 * B * n; d += 16 * B) {
    F16 acc[T][B];
    for (int p = 0; p < T; ++p)
      for (int b = 0; b < B; ++b)
        acc[p][b] = Part ? loadn(sum + p * hd + d, w) : load(sum + p * hd + d + 16 * b);
    for (int64_t u = u0; u < u1; ++u) {
      const KV* vr = vb + (C ? u : keys[u]) * hd + d;
      F16 vv[B];
      for (int b = 0; b < B; ++b) vv[b] = Part ? kv_loadn(vr, w) : kv_load(vr + 16 * b);
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

template <int T, bool C, typename KV>
void v_sum_tile(const float* e, int64_t ld, const KV* vb, int64_t hd, const Keys& keys, int64_t u0, int64_t u1,
                float* sum) {
  constexpr int B = T * 4 <= kVAcc ? 4 : T * 2 <= kVAcc ? 2 : 1;  // vectors per slice
  const int64_t full = hd / (16 * B), rest = hd % (16 * B) / 16;
  if (full) v_sum<T, B, C>(e, ld, vb, hd, keys, u0, u1, sum, 0, full);
  if (rest) v_sum<T, 1, C>(e, ld, vb, hd, keys, u0, u1, sum, 16 * B * full, rest);
  if (hd % 16) v_sum<T, 1, C, true>(e, ld, vb, hd, keys, u0, u1, sum, hd / 16 * 16, 1);
}

// v_sum_tile for T <= kVPairs pairs chosen at run time
template <bool C, typename KV>
void v_sum_tile_n(int64_t T, const float* e, int64_t ld, const KV* vb, int64_t hd, const Keys& keys, int64_t u0,
                  int64_t u1, float* sum) {
  static_assert(kVPairs >= 1 && kVPairs <= 4);
  switch (T) {
    case 1: v_sum_tile<1, C, KV>(e, ld, vb, hd, keys, u0, u1, sum); break;
    case 2: v_sum_tile<std::min(2, kVPairs), C, KV>(e, ld, vb, hd, keys, u0, u1, sum); break;
    case 3: v_sum_tile<std::min(3, kVPairs), C, KV>(e, ld, vb, hd, keys, u0, u1, sum); break;
    default: v_sum_tile<kVPairs, C, KV>(e, ld, vb, hd, keys, u0, u1, sum); break;
  }
}

// Pairs [0, P) over keys [u0, u1) of one list, in chunks of V rows (~24 KB) that stay in L1
// while every tile of pairs passes, so V leaves memory once for all the pairs, not once per pair.
template <typename KV>
void v_sum_pairs(const float* e, int64_t ld, int64_t P, const KV* vb, int64_t hd, const Keys& keys,
                 int64_t u0, int64_t u1, float* sum) {
  const int64_t chunk = std::max<int64_t>(16, 24 * 1024 / (int64_t(sizeof(KV)) * hd));
  for (int64_t c0 = u0; c0 < u1; c0 += chunk) {
    const int64_t c1 = std::min(c0 + chunk, u1);
    const auto tile = c1 <= keys.start ? v_sum_tile_n<true, KV> : v_sum_tile_n<false, KV>;
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
template <typename KV>
void attend_block(const float* q, int64_t q_ld, int64_t nr, int64_t G, const KV* kb, const KV* vb,
                         int64_t hd, const Keys* keys, float sc, float* s, int64_t ld, float* sum, float* out,
                         int64_t out_ld) {
  const int64_t P = nr * G, start = keys[0].start;
  const auto score = hd == 64 ? scores<64, KV> : scores<0, KV>;
  if (P >= kLanePairs && hd == 64)
    scores_keys<kLaneT, kLaneB, 4>(q, q_ld, P, G, kb, sc, start, s, ld, vb);
  else if (P >= kLanePairs && hd == 128)
    scores_keys<kLaneT, kLaneB, 8>(q, q_ld, P, G, kb, sc, start, s, ld, vb);
  else
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
