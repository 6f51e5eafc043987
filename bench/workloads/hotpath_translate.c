/* Fixed-count loops over nicmalloc's NIC-side hot paths, for callgrind (bench/run_all.sh's
 * nic-paths step counts instructions inside each loop_<name> function only, after a warm-up
 * outside it):
 *   translate_dp    nic_translate of a dataplane block (the O(1) chunk lookup)
 *   translate_ctl   nic_translate of a control-heap block (the "not dataplane" answer)
 *   sga_add_arena   nic_sga_add of 4 KiB entries in a dataplane chunk, 16 per array, then reset
 *   sga_add_cached  the same for control-heap memory (registration-cache hit)
 * Usage: hotpath_translate NAME [calls, default 100000]. Run with NICMALLOC_BACKEND=sim. */
#include <nicmalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kEntries = 16, kStride = 16384, kLen = 4096, kWarmup = 1000 };

static char *dp, *ctl;
static long failures;

/* Each path is a plain function the warm-up calls directly and a loop_<name> wrapper that only
 * the measured calls go through: callgrind collects while loop_<name> is on the stack, so the
 * warm-up's first registration and cache fill must not run inside it. */
static void translate_dp(long n) {
  struct nic_region_ref ref;
  for (long i = 0; i < n; i++)
    failures += nic_translate(dp + (i & 1023) * 64, 64, &ref) != 0;
}

static void translate_ctl(long n) {
  struct nic_region_ref ref;
  for (long i = 0; i < n; i++)
    failures += nic_translate(ctl + (i & 1023) * 64, 64, &ref) != -NIC_ENOTDP;
}

/* n adds in arrays of kEntries entries kStride apart (so none coalesce); the reset that ends
 * each array is counted too, one per kEntries adds. */
static void sga_adds(char *base, long n) {
  struct nic_sga sga;
  if (nic_sga_init(&sga, kEntries) != 0) {
    fprintf(stderr, "hotpath_translate: nic_sga_init failed (NICMALLOC_BACKEND=sim?)\n");
    exit(1);
  }
  for (long i = 0; i < n; i++) {
    failures += nic_sga_add(&sga, base + (i % kEntries) * kStride, kLen) != 0;
    if (i % kEntries == kEntries - 1) nic_sga_reset(&sga);
  }
  nic_sga_reset(&sga);
}

static void sga_add_arena(long n) {
  sga_adds(dp, n);
}
static void sga_add_cached(long n) {
  sga_adds(ctl, n);
}

__attribute__((noinline)) void loop_translate_dp(long n) {
  translate_dp(n);
}
__attribute__((noinline)) void loop_translate_ctl(long n) {
  translate_ctl(n);
}
__attribute__((noinline)) void loop_sga_add_arena(long n) {
  sga_add_arena(n);
}
__attribute__((noinline)) void loop_sga_add_cached(long n) {
  sga_add_cached(n);
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    void (*warm)(long), (*loop)(long);
  } loops[] = {{"translate_dp", translate_dp, loop_translate_dp},
               {"translate_ctl", translate_ctl, loop_translate_ctl},
               {"sga_add_arena", sga_add_arena, loop_sga_add_arena},
               {"sga_add_cached", sga_add_cached, loop_sga_add_cached}};
  long calls = argc > 2 ? atol(argv[2]) : 100000;
  dp = nic_malloc(kEntries * kStride);
  ctl = malloc(kEntries * kStride);
  if (!dp || !ctl || !nic_is_dataplane(dp) || nic_is_dataplane(ctl)) {
    fprintf(stderr, "hotpath_translate: could not get one dataplane and one control buffer\n");
    return 1;
  }
  memset(dp, 1, kEntries * kStride);
  memset(ctl, 1, kEntries * kStride);
  for (int i = 0; argc > 1 && i < 4; i++) {
    if (strcmp(argv[1], loops[i].name) != 0) continue;
    loops[i].warm(kWarmup); /* first calls register the chunk / fill the cache: not counted */
    failures = 0;
    loops[i].loop(calls);
    printf("%s: %ld calls, %ld failed\n", loops[i].name, calls, failures);
    return failures != 0;
  }
  fprintf(stderr, "usage: %s translate_dp|translate_ctl|sga_add_arena|sga_add_cached [calls]\n",
          argv[0]);
  return 2;
}
