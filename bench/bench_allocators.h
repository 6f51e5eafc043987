/* Start-up checks shared by the benchmark and the callgrind driver (C and C++).
 *
 * The binaries link libnicmalloc before libmimalloc, so malloc/free resolve to nicmalloc's control
 * path. glibc's own malloc/free come from dlsym on the already loaded libc.so.6 (not __libc_malloc,
 * which mimalloc also exports). bench_init() resolves them and aborts, loudly, when any allocator
 * under test is not the one its name claims. */
#ifndef NICMALLOC_BENCH_ALLOCATORS_H
#define NICMALLOC_BENCH_ALLOCATORS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <mimalloc.h>
#include <nicmalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *(*bench_malloc_fn)(size_t);
typedef void (*bench_free_fn)(void *);

static bench_malloc_fn glibc_malloc;
static bench_free_fn glibc_free;

static void bench_fail(const char *what) {
  fprintf(stderr, "bench: FATAL: %s\n", what);
  abort();
}

/* Dies unless fn lives in a loaded object whose file name contains lib_part. */
static void bench_expect_in(const void *fn, const char *sym, const char *lib_part) {
  Dl_info info;
  if (!fn || !dladdr(fn, &info) || !info.dli_fname || !strstr(info.dli_fname, lib_part)) {
    fprintf(stderr, "bench: FATAL: %s resolves to %p in %s, expected an object named *%s*\n", sym,
            fn, fn && dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?", lib_part);
    abort();
  }
}

static void bench_init(void) {
  void *libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
  if (!libc) bench_fail("libc.so.6 is not loaded");
  glibc_malloc = (bench_malloc_fn)dlsym(libc, "malloc");
  glibc_free = (bench_free_fn)dlsym(libc, "free");
  void *def_malloc = dlsym(RTLD_DEFAULT, "malloc");
  void *def_free = dlsym(RTLD_DEFAULT, "free");
  if (!glibc_malloc || !glibc_free) bench_fail("dlsym(libc.so.6, malloc/free) failed");
  if ((void *)glibc_malloc == (void *)&malloc || (void *)glibc_malloc == def_malloc ||
      (void *)glibc_malloc == (void *)&mi_malloc || (void *)glibc_free == (void *)&free ||
      (void *)glibc_free == def_free || (void *)glibc_free == (void *)&mi_free)
    bench_fail("glibc malloc/free is the same function as nicmalloc's or mimalloc's");
  bench_expect_in((void *)glibc_malloc, "glibc malloc", "libc.so");
  bench_expect_in(def_malloc, "malloc", "libnicmalloc");
  bench_expect_in(def_free, "free", "libnicmalloc");
  bench_expect_in((void *)&mi_malloc, "mi_malloc", "libmimalloc");
  bench_expect_in((void *)&mi_free, "mi_free", "libmimalloc");
  bench_expect_in((void *)&nic_malloc, "nic_malloc", "libnicmalloc");

  void *g = glibc_malloc(64), *m = mi_malloc(64), *c = malloc(64), *d = nic_malloc(64);
  if (!g || !m || !c || !d) bench_fail("a 64-byte allocation returned NULL");
  if (nic_is_dataplane(c)) bench_fail("malloc returned dataplane memory (control path expected)");
  if (!nic_is_dataplane(d)) bench_fail("nic_malloc did not return dataplane memory");
  glibc_free(g);
  mi_free(m);
  free(c);
  free(d);
}

#endif /* NICMALLOC_BENCH_ALLOCATORS_H */
