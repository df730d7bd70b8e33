// The core clock and the int8 multiply-add rate plain AVX2's instructions sustain on one core,
// the ceiling under the GGUF kernels' verify rows (docs/verify-cost-breakdown.md):
//
//   gcc -O2 -mavx2 benchmarks/avx2_idiom.c -o /tmp/avx2_idiom && /tmp/avx2_idiom
//
// clock: a chain of dependent scalar adds (one a cycle), so the "cycles" below are measured ones,
// not /proc/cpuinfo's (a VM may report a nominal clock). Then per cycle, 6 independent chains:
//   vpmaddubsw alone                        the multiplier's issue rate (32 u8 x s8 products each)
//   vpmaddubsw + vpaddw                     a product summed into int16 accumulators (the Q4 loop's
//                                           step: AVX2 has no multiply-accumulate for int8)
//   vpbroadcastd (mem) + vpmaddubsw + vpaddw  the same with the activation broadcast from memory
// Thread CPU time; on a shared machine run it a few times and take the best.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>

#define N 60000000L
#include "idiom_clock.h"
static int32_t buf[16] __attribute__((aligned(64)));
#define MUL(k, t) "vpmaddubsw %6,%7,%%ymm" #t "\n\t"
#define SUM(k, t) "vpmaddubsw %6,%7,%%ymm" #t "\n\tvpaddw %%ymm" #t ",%" #k ",%" #k "\n\t"
#define BC(k, t) \
  "vpbroadcastd (%8),%%ymm" #t "\n\t" \
  "vpmaddubsw %%ymm" #t ",%6,%%ymm" #t "\n\tvpaddw %%ymm" #t ",%" #k ",%" #k "\n\t"
#define RUN(U)                                                                                   \
  asm volatile(U(0, 12) U(1, 13) U(2, 14) U(3, 15) U(4, 12) U(5, 13)                              \
               : "+x"(s0), "+x"(s1), "+x"(s2), "+x"(s3), "+x"(s4), "+x"(s5)                       \
               : "x"(w), "x"(x), "r"(buf)                                                         \
               : "xmm12", "xmm13", "xmm14", "xmm15")

static double per_unit(int v) {  // seconds per unit (one vpmaddubsw and what goes with it)
  __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(1), s0 = w, s1 = w, s2 = w, s3 = w, s4 = w, s5 = w;
  double t = now();
  for (long i = 0; i < N / 6; i++) {
    if (v == 0) RUN(MUL);
    else if (v == 1) RUN(SUM);
    else RUN(BC);
  }
  t = now() - t;
  asm volatile("" ::"x"(s0), "x"(s1), "x"(s2), "x"(s3), "x"(s4), "x"(s5));
  return t / (6.0 * (N / 6));
}

int main(void) {
  const char* name[] = {"vpmaddubsw", "vpmaddubsw + vpaddw", "vpbroadcastd + vpmaddubsw + vpaddw"};
  for (int r = 0; r < 3; r++) {
    const double c = cycle();
    printf("clock %.2f GHz:", 1 / c / 1e9);
    for (int v = 0; v < 3; v++) {
      const double u = per_unit(v);
      printf("  %s %.2f/cycle = %.1f int8 multiply-adds/cycle;", name[v], c / u, 32 * c / u);
    }
    printf("\n");
  }
  return 0;
}
