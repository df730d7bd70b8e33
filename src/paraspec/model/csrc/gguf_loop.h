// The GGUF integer inner loop, one source for every variant: isa_avx512.h and isa_avx2.h include
// it inside a namespace that defines the variant's `GOp` (how a step's weights are unpacked and
// multiplied), each inside its own target region. No include guard: included repeatedly.
//
// R rows times one 32-channel panel over one 32-block (8 steps of 4 features): the int32 dot
// products go to acc[32 * r + channel]. Integer sums are exact, so neither the tile size nor
// the variant changes them (VNNI Q8_0 sums carry GOp::kQ8Offset * xs extra, taken off in
// gguf.h's epilogue).
// Q4 and Q8_0 steps may hold activations in different forms (AVX2's Q8_0 needs |x| and x).
template <bool Q8>
inline auto gprep(int32_t x4) {
  if constexpr (Q8) return GOp::prep8(x4);
  else return GOp::prep4(x4);
}
template <bool Q8, typename X>
inline typename GOp::Acc gmac(typename GOp::Acc a, const X& x, typename GOp::Acc w) {
  if constexpr (Q8) return GOp::mac8(a, x, w);
  else return GOp::mac4(a, x, w);
}

template <int R, bool Q8>
void block_sums(const uint8_t* wq, const int32_t* xw, int64_t ldx, int32_t* acc) {
  using A = typename GOp::Acc;
  constexpr int V = GOp::kVecs, L = 32 / V;  // accumulators per row, channels in each
  // Named accumulators (not an array), as w8a8_loop.h: GCC 12 would copy an array every step.
#define PS_ACC1(i, j) A a##i##j = GOp::zero_acc();
#define PS_ACC(i) PS_ACC1(i, 0) PS_ACC1(i, 1) PS_ACC1(i, 2) PS_ACC1(i, 3)
  PS_ACC(0) PS_ACC(1) PS_ACC(2) PS_ACC(3) PS_ACC(4) PS_ACC(5) PS_ACC(6) PS_ACC(7)
#define PS_ROW(i)                                                                 \
  if constexpr (R > i) {                                                          \
    const auto x = gprep<Q8>(xw[i * ldx + k]);                                    \
    a##i##0 = gmac<Q8>(a##i##0, x, w0);                                           \
    a##i##1 = gmac<Q8>(a##i##1, x, w1);                                           \
    if constexpr (V > 2) {                                                        \
      a##i##2 = gmac<Q8>(a##i##2, x, w2);                                         \
      a##i##3 = gmac<Q8>(a##i##3, x, w3);                                         \
    }                                                                             \
  }
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    A w0, w1, w2, w3;  // the step's weights in channel order, L channels each
    if constexpr (Q8) GOp::load_q8(wq + 128 * k, w0, w1, w2, w3);
    else GOp::load_q4(wq + 64 * k, w0, w1, w2, w3);
    PS_ROW(0) PS_ROW(1) PS_ROW(2) PS_ROW(3) PS_ROW(4) PS_ROW(5) PS_ROW(6) PS_ROW(7)
  }
#define PS_OUT1(i, j) if constexpr (R > i && V > j) GOp::store_acc(acc + 32 * i + L * j, a##i##j);
#define PS_OUT(i) PS_OUT1(i, 0) PS_OUT1(i, 1) PS_OUT1(i, 2) PS_OUT1(i, 3)
  PS_OUT(0) PS_OUT(1) PS_OUT(2) PS_OUT(3) PS_OUT(4) PS_OUT(5) PS_OUT(6) PS_OUT(7)
#undef PS_OUT
#undef PS_OUT1
#undef PS_ROW
#undef PS_ACC
#undef PS_ACC1
}

constexpr int gtile(int r) { return r < GOp::kRows ? r : GOp::kRows; }  // never asked for more than kRows

constexpr GgufLoop kGgufLoop = {
    GOp::kRows, GOp::kQ8Offset,
    {nullptr, block_sums<gtile(1), false>, block_sums<gtile(2), false>, block_sums<gtile(3), false>,
     block_sums<gtile(4), false>, block_sums<gtile(5), false>, block_sums<gtile(6), false>,
     block_sums<gtile(7), false>, block_sums<gtile(8), false>},
    {nullptr, block_sums<gtile(1), true>, block_sums<gtile(2), true>, block_sums<gtile(3), true>,
     block_sums<gtile(4), true>, block_sums<gtile(5), true>, block_sums<gtile(6), true>,
     block_sums<gtile(7), true>, block_sums<gtile(8), true>}};
