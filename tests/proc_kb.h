/* A probe's reading of its own /proc files: the number on a "Key:  N kB" line. */
#ifndef NIC_TESTS_PROC_KB_H
#define NIC_TESTS_PROC_KB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The last line of path starting with key, as a number of kB; -1 when there is none. */
static inline long nic_proc_kb(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  const size_t n = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, n)) kb = strtol(line + n, NULL, 10);
  fclose(f);
  return kb;
}

#endif
