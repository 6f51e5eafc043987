/* Names nothing libnicmalloc defines: it allocates only through the C library (strdup), as a
 * program whose allocations are all made by its libraries does, and never frees (free is
 * libnicmalloc's too). The link must keep libnicmalloc all the same (gcc's --as-needed drops a
 * library that defines nothing the program's objects call), and its malloc must be the one
 * calls reach. Prints the file of the object that defines that malloc. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *s = strdup("owner");
  Dl_info info;
  void *m = dlsym(RTLD_DEFAULT, "malloc");
  if (!s || !m || !dladdr(m, &info) || !info.dli_fname) return 1;
  const char *slash = strrchr(info.dli_fname, '/');
  printf("malloc: %s\n", slash ? slash + 1 : info.dli_fname);
  return 0;
}
