// The core clock and the int8 multiply-add rate AVX-512 VNNI's instructions sustain on one core,
// the ceiling under the GGUF kernels' verify rows on an AVX-512 CPU (docs/verify-cost-breakdown.md;
// avx2_idiom.c is the same for plain AVX2):
//
//   gcc -O2 -mavx512f -mavx512bw -mavx512vl -mavx512vnni benchmarks/vnni_idiom.c -o /tmp/vnni_idiom && /tmp/vnni_idiom
//
// clock: a chain of dependent scalar adds (one a cycle), so "cycles" are measured ones. Then per
// cycle, 8 independent accumulators (vpdpbusd's latency is several cycles):
//   vpdpbusd ymm / zmm                    u8 x s8 products, 4 summed into each int32 lane and
//                                         accumulated (32 / 64 multiply-adds an instruction)
//   vpbroadcastd (mem) + vpdpbusd zmm     the same with the activation broadcast from memory,
//                                         as a kernel's tile does per row and step
//   vpmaddubsw + vpaddw zmm               AVX2's idiom at 512 bits (for comparison)
//   8 vpdpbusd zmm + 3 vmulps zmm         the GGUF tiles' mix per row, 16 channels and 32-block:
//                                         8 steps' products, then the float step's 3 multiplies
//                                         (gguf.h, no FMA); reported per vpdpbusd
//   8 vpdpbusd zmm + 3 vaddps zmm         the same with adds instead (other pipes on Zen 4)
// Thread CPU time; on a shared machine run it a few times and take the best.
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>

#define N 48000000L
#include "idiom_clock.h"
static int32_t buf[16] __attribute__((aligned(64)));
#define DPY(k, t) "vpdpbusd %%ymm30,%%ymm31,%%ymm" #k "\n\t"
#define DPZ(k, t) "vpdpbusd %%zmm30,%%zmm31,%%zmm" #k "\n\t"
#define BCZ(k, t) "vpbroadcastd (%0),%%zmm" #t "\n\tvpdpbusd %%zmm" #t ",%%zmm31,%%zmm" #k "\n\t"
#define SUMZ(k, t) "vpmaddubsw %%zmm30,%%zmm31,%%zmm" #t "\n\tvpaddw %%zmm" #t ",%%zmm" #k ",%%zmm" #k "\n\t"
// a tile's 8 products then 3 float ops on independent registers (units: one vpdpbusd)
#define MIX(op)                                                                               \
  asm volatile(DPZ(0, 0) DPZ(1, 0) DPZ(2, 0) DPZ(3, 0) DPZ(4, 0) DPZ(5, 0) DPZ(6, 0) DPZ(7, 0) \
               op " %%zmm28,%%zmm16,%%zmm16\n\t" op " %%zmm28,%%zmm17,%%zmm17\n\t"          \
               op " %%zmm28,%%zmm18,%%zmm18\n\t"                                             \
               :                                                                             \
               :                                                                             \
               : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm16",    \
                 "xmm17", "xmm18")
#define RUN(U)                                                                               \
  asm volatile(U(0, 16) U(1, 17) U(2, 18) U(3, 19) U(4, 20) U(5, 21) U(6, 22) U(7, 23)       \
               :                                                                             \
               : "r"(buf)                                                                    \
               : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm16",    \
                 "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "memory")

static double per_unit(int v) {  // seconds per unit (one product instruction and what goes with it)
  asm volatile("vpternlogd $0xff,%%zmm30,%%zmm30,%%zmm30\n\tvpabsb %%zmm30,%%zmm31\n\t"
               "vcvtdq2ps %%zmm31,%%zmm28\n\tvmovaps %%zmm28,%%zmm16\n\tvmovaps %%zmm28,%%zmm17\n\t"
               "vmovaps %%zmm28,%%zmm18" ::: "xmm16", "xmm17", "xmm18", "xmm28", "xmm30", "xmm31");
  double t = now();
  for (long i = 0; i < N / 8; i++) {
    if (v == 0) RUN(DPY);
    else if (v == 1) RUN(DPZ);
    else if (v == 2) RUN(BCZ);
    else if (v == 3) RUN(SUMZ);
    else if (v == 4) MIX("vmulps");
    else MIX("vaddps");
  }
  return (now() - t) / (8.0 * (N / 8));
}

int main(void) {
  const char* name[] = {"vpdpbusd ymm", "vpdpbusd zmm", "vpbroadcastd + vpdpbusd zmm",
                        "vpmaddubsw + vpaddw zmm", "8 vpdpbusd + 3 vmulps zmm", "8 vpdpbusd + 3 vaddps zmm"};
  const int macs[] = {32, 64, 64, 64, 64, 64};
  for (int r = 0; r < 3; r++) {
    const double c = cycle();
    printf("clock %.2f GHz:\n", 1 / c / 1e9);
    for (int v = 0; v < 6; v++) {
      const double u = per_unit(v);
      printf("  %-30s %.2f/cycle = %5.1f int8 multiply-adds/cycle\n", name[v], c / u,
             macs[v] * c / u);
    }
  }
  return 0;
}
