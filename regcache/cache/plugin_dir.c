/* The directory of libnicmalloc.so's real file (plugin_dir.h). */
#define _GNU_SOURCE
#include "plugin_dir.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static char dir[PATH_MAX];
static pthread_once_t found = PTHREAD_ONCE_INIT;

/* Once for the process, whoever asks first: the constructor, or a thread another library's
 * constructor started before ours ran, which must not read a directory half written. */
static void find(void) {
  Dl_info self;
  if (!dladdr((void *)&nic_plugin_dir_find, &self) || !self.dli_fname) return;
  /* Where realpath fails (the file was removed since), the loader's path is the best left. */
  static char real[PATH_MAX];
  const char *path = realpath(self.dli_fname, real) ? real : self.dli_fname;
  const char *slash = strrchr(path, '/');
  const size_t len = slash ? (size_t)(slash - path) + 1 : 0;
  if (len >= sizeof dir) return;
  memcpy(dir, path, len);
  dir[len] = '\0';
}

void nic_plugin_dir_find(void) {
  pthread_once(&found, find);
}

const char *nic_plugin_dir(void) {
  pthread_once(&found, find);
  return dir;
}
