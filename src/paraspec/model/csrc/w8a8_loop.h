// The W8A8 inner loop, one source for every variant: isa_avx512.h and isa_avx2.h include it
// inside a namespace that defines the variant's step `Op` (vpdpbusd on zmm or ymm, or AVX2's
// vpmaddubsw sequence), each inside its own target region, so each copy is compiled for the
// instructions of its variant alone (a template over Op could not be: GCC compiles a template
// with the target options in force where it is defined). No include guard: included repeatedly.
//
// R sub-rows (R <= Op::kRows) times one 32-channel panel over k4 steps [k0, k1): the int32 dot
// products are added to acc[32 * r + channel] (which starts from zero when `init`). Integer
// sums are exact, so the tiling, the variant and the row's neighbours never change the result.
template <int R>
void accumulate(const int32_t* xw, int64_t K4, const int8_t* w, int64_t k0, int64_t k1,
                int32_t* acc, bool init) {
  using A = typename Op::Acc;
  constexpr int V = Op::kVecs, L = 32 / V;  // accumulators per sub-row, channels in each
  A a[R][V];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) a[i][j] = init ? Op::zero_acc() : Op::load_acc(acc + 32 * i + L * j);
  for (int64_t k = k0; k < k1; ++k) {
    const int8_t* wk = w + k * 128;  // 32 channels x 4 features
    // the weights stream from DRAM once per token: fetch ahead (a thread's panels are
    // contiguous, so this runs on into the next panel)
    _mm_prefetch(reinterpret_cast<const char*>(wk) + kPrefetch, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wk) + kPrefetch + 64, _MM_HINT_T0);
    A wv[V];
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) wv[j] = Op::load_w(wk + L * 4 * j);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const auto x = Op::prep(xw[i * K4 + k]);
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) a[i][j] = Op::mac(a[i][j], x, wv[j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) Op::store_acc(acc + 32 * i + L * j, a[i][j]);
}

constexpr int tile(int r) { return r < Op::kRows ? r : Op::kRows; }  // never asked for more than kRows

constexpr W8A8Loop kLoop = {Op::kRows, Op::kOffset,
                            {nullptr, accumulate<tile(1)>, accumulate<tile(2)>, accumulate<tile(3)>, accumulate<tile(4)>,
                             accumulate<tile(5)>, accumulate<tile(6)>, accumulate<tile(7)>, accumulate<tile(8)>}};
