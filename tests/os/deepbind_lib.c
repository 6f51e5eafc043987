/* A library the deepbind probe loads with RTLD_DEEPBIND: its malloc and free are whatever its
 * own lookup finds. */
#include <stdlib.h>
#include <string.h>

char *deepbind_strdup(const char *s) {
  char *p = malloc(strlen(s) + 1);
  if (p) strcpy(p, s);
  return p;
}

void deepbind_free(void *p) {
  free(p);
}
