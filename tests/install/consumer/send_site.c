/* An allocation whose bytes reach send(): the installed LLVM pass rewrites it to
 * nic_malloc_site. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

ssize_t reply(int fd, const char *text) {
  const size_t n = strlen(text);
  char *buf = malloc(n);
  if (!buf) return -1;
  memcpy(buf, text, n);
  const ssize_t sent = send(fd, buf, n, 0);
  free(buf);
  return sent;
}
