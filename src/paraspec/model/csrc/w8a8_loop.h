// The W8A8 inner loop, one source for every variant: isa_avx512.h and isa_avx2.h include it
// inside a namespace that defines the variant's step `Op` (vpdpbusd on zmm or ymm, or AVX2's
// vpmaddubsw sequence), each inside its own target region, so each copy is compiled for the
// instructions of its variant alone. No include guard: it is meant to be included repeatedly.
//
// R sub-rows (R <= Op::kRows) times one 32-channel panel over k4 steps [k0, k1): the int32 dot
// products are added to acc[32 * r + channel] (which starts from zero when `init`). Integer
// sums are exact, so the tiling, the variant and the row's neighbours never change the result.
template <int R>
void accumulate(const int32_t* xw, int64_t K4, const int8_t* w, int64_t k0, int64_t k1,
                int32_t* acc, bool init) {
  using A = typename Op::Acc;
  constexpr int V = Op::kVecs, L = 32 / V;  // accumulators per sub-row, channels in each
  // Named accumulators (not an array): GCC 12 otherwise copies every register once per step.
#define PS_ACC1(i, j) A a##i##j = (R > i && V > j && !init) ? Op::load_acc(acc + 32 * i + L * j) : Op::zero_acc();
#define PS_ACC(i) PS_ACC1(i, 0) PS_ACC1(i, 1) PS_ACC1(i, 2) PS_ACC1(i, 3)
  PS_ACC(0) PS_ACC(1) PS_ACC(2) PS_ACC(3) PS_ACC(4) PS_ACC(5) PS_ACC(6) PS_ACC(7)
#define PS_ROW(i)                                                   \
  if constexpr (R > i) {                                            \
    const auto x = Op::prep(xw[i * K4 + k]);                        \
    a##i##0 = Op::mac(a##i##0, x, w0);                              \
    if constexpr (V > 1) a##i##1 = Op::mac(a##i##1, x, w1);         \
    if constexpr (V > 2) a##i##2 = Op::mac(a##i##2, x, w2);         \
    if constexpr (V > 3) a##i##3 = Op::mac(a##i##3, x, w3);         \
  }
  for (int64_t k = k0; k < k1; ++k) {
    const int8_t* wk = w + k * 128;  // 32 channels x 4 features
    // Weights stream from DRAM once per token: prefetch 64 steps ahead (a thread's panels are
    // contiguous, so this runs on into the next panel). Measured: M=8 -15%, M=16 -30%, M=1 same.
    _mm_prefetch(reinterpret_cast<const char*>(wk) + kPrefetch, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(wk) + kPrefetch + 64, _MM_HINT_T0);
    const A w0 = Op::load_w(wk);
    const A w1 = V > 1 ? Op::load_w(wk + L * 4) : w0;
    const A w2 = V > 2 ? Op::load_w(wk + 2 * L * 4) : w0;
    const A w3 = V > 3 ? Op::load_w(wk + 3 * L * 4) : w0;
    PS_ROW(0) PS_ROW(1) PS_ROW(2) PS_ROW(3) PS_ROW(4) PS_ROW(5) PS_ROW(6) PS_ROW(7)
  }
#define PS_OUT1(i, j) if constexpr (R > i && V > j) Op::store_acc(acc + 32 * i + L * j, a##i##j);
#define PS_OUT(i) PS_OUT1(i, 0) PS_OUT1(i, 1) PS_OUT1(i, 2) PS_OUT1(i, 3)
  PS_OUT(0) PS_OUT(1) PS_OUT(2) PS_OUT(3) PS_OUT(4) PS_OUT(5) PS_OUT(6) PS_OUT(7)
#undef PS_OUT
#undef PS_OUT1
#undef PS_ROW
#undef PS_ACC
#undef PS_ACC1
}

constexpr int tile(int r) { return r < Op::kRows ? r : Op::kRows; }  // never asked for more than kRows

constexpr W8A8Loop kLoop = {Op::kRows, Op::kOffset,
                            {nullptr, accumulate<tile(1)>, accumulate<tile(2)>, accumulate<tile(3)>, accumulate<tile(4)>,
                             accumulate<tile(5)>, accumulate<tile(6)>, accumulate<tile(7)>, accumulate<tile(8)>}};
