/* A program that does not link nicmalloc and loads a library that does with dlopen
 * (dlopen_ext.c, its path the first argument), runs it, closes it, and goes on for a while:
 * nicmalloc's threads still run, so nicmalloc must stay loaded (its path the second argument).
 * Built twice: as the toolchain builds programs, and without PIE (TAKE_ALLOCATOR_ADDRESSES). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef TAKE_ALLOCATOR_ADDRESSES
/* Built without PIE (dlopen_host_no_pie), this binds malloc and free to entries of the program's
 * own procedure linkage table, which pass calls on to glibc's. */
static void *(*volatile malloc_ref)(size_t);
static void (*volatile free_ref)(void *);
#endif

int main(int argc, char **argv) {
  if (argc < 3) return 2;
#ifdef TAKE_ALLOCATOR_ADDRESSES
  malloc_ref = malloc; /* in code: an absolute operand, which makes the entries canonical */
  free_ref = free;
#endif
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen_host: %s\n", dlerror());
    return 1;
  }
  int (*run)(void) = (int (*)(void))dlsym(lib, "dlopen_ext_run");
  if (!run) return 1;
  const int rc = run();
  dlclose(lib);
  printf("still_loaded=%d\n", dlopen(argv[2], RTLD_NOW | RTLD_NOLOAD) != NULL);
  fflush(stdout);
  usleep(300 * 1000);
  return rc;
}
