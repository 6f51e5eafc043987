/* See plugin_env.h. */
#define _GNU_SOURCE
#include "plugin_env.h"

#include "imports.h"
#include "interpose_env.h"
#include "settings.h"

#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define KNOWN_MAX 4096 /* objects before the first plugin; beyond that, nothing is guarded */

static uintptr_t known[KNOWN_MAX]; /* load addresses; under the backend lock */
static unsigned known_count;
static bool marked, overflowed;

static char *plugin_getenv(const char *name) {
  if (name && !strcmp(name, "RUNTIME_DIRECTORY"))
    return geteuid() == 0 ? (char *)"/var/run" : (char *)"/dev/null";
  return NULL;
}

void nic_plugin_env_hide(void) {
  if (nic_secure_execution()) nic_env_hide(plugin_getenv("RUNTIME_DIRECTORY"));
}

void nic_plugin_env_show(void) {
  nic_env_show();
}

static int note(struct dl_phdr_info *info, size_t size, void *unused) {
  (void)size, (void)unused;
  if (known_count < KNOWN_MAX)
    known[known_count++] = info->dlpi_addr;
  else
    overflowed = true;
  return 0;
}

void nic_plugin_env_mark(void) {
  if (marked || !nic_secure_execution()) return;
  dl_iterate_phdr(note, NULL);
  marked = true;
}

static bool is_known(uintptr_t base) {
  for (unsigned i = 0; i < known_count; i++)
    if (known[i] == base) return true;
  return false;
}

static int guard_one(struct dl_phdr_info *info, size_t size, void *changed) {
  (void)size;
  if (is_known(info->dlpi_addr)) return 0;
  struct link_map map = {.l_addr = info->dlpi_addr};
  for (int i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      map.l_ld = (ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (!map.l_ld) return 0;
  struct nic_import imports[] = {{"getenv", (void *)plugin_getenv, false}};
  if (nic_imports_redirect(&map, imports, 1) && imports[0].done) (*(unsigned *)changed)++;
  return 0;
}

unsigned nic_plugin_env_guard(void) {
  unsigned changed = 0;
  if (marked && !overflowed && nic_secure_execution()) dl_iterate_phdr(guard_one, &changed);
  return changed;
}
