// The clock both instruction microbenchmarks (avx2_idiom.c, vnni_idiom.c) measure in: the thread's
// CPU time, and the core's cycle by a chain of dependent scalar adds (one a cycle), so the
// "cycles" they report are measured ones, not the clock a VM's /proc/cpuinfo may give.
// Each includes it after defining N, its loop count.
#include <stdint.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cycle(void) {  // seconds per cycle
  uint64_t x = 1;
  double t = now();
  for (long i = 0; i < N; i++) asm volatile("add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0" : "+r"(x));
  return (now() - t) / (4.0 * N);
}
