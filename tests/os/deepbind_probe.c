/* deepbind_probe [dlmopen]: loads a library with RTLD_DEEPBIND (with dlopen, or dlmopen into
 * the base namespace), by a bare name that only this program's RUNPATH ($ORIGIN) finds, then
 * passes blocks across both ways: one the library allocated, freed here; one allocated here,
 * freed by the library. Not linked with nicmalloc: run it with LD_PRELOAD. Prints key=value
 * lines for test_deepbind. */
#define _GNU_SOURCE
#include "nicmalloc.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  const char *name = "libnic_deepbind_lib.so";
  const int mode = RTLD_NOW | RTLD_DEEPBIND;
  void *lib = argc > 1 && !strcmp(argv[1], "dlmopen") ? dlmopen(LM_ID_BASE, name, mode)
                                                      : dlopen(name, mode);
  printf("loaded=%d\n", lib != NULL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  char *(*lib_strdup)(const char *) = (char *(*)(const char *))dlsym(lib, "deepbind_strdup");
  void (*lib_free)(void *) = (void (*)(void *))dlsym(lib, "deepbind_free");
  if (!lib_strdup || !lib_free) return 1;
  char *theirs = lib_strdup("from the library");
  printf("theirs_intact=%d\n", theirs && strcmp(theirs, "from the library") == 0);
  free(theirs);
  char *ours = strdup("from the program");
  lib_free(ours);
  printf("crossed=1\n");
  /* nicmalloc's counts: a free of a block it did not allocate is an invalid free. */
  int (*get_stats)(struct nic_stats *) =
      (int (*)(struct nic_stats *))dlsym(RTLD_DEFAULT, "nic_get_stats");
  struct nic_stats stats;
  memset(&stats, 0, sizeof stats);
  stats.size = sizeof stats;
  printf("preloaded=%d\n", get_stats != NULL && get_stats(&stats) == 0);
  printf("invalid_frees=%llu\n", (unsigned long long)stats.invalid_frees);
  dlclose(lib);
  return 0;
}
