/* What an attacker would hand DPDK's EAL with -d: its constructor leaves a mark naming the user
 * it ran as. Loaded into a setuid-root process, the mark says 0. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((constructor)) static void leave_mark(void) {
  const char *mark = getenv("EVIL_MARK");
  FILE *f = fopen(mark ? mark : "/nonexistent", "w");
  if (!f) return;
  fprintf(f, "loaded with euid %d\n", (int)geteuid());
  fclose(f);
}
