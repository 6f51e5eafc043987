/* The modules a NICMALLOC_SITES profile names, and where each is loaded in this process. A
 * profile names modules by path and the sites' frames as offsets in them; a module is matched by
 * base name (the same library may be reached through different symlinks on the next run), and
 * its load bias is looked up once per scan of the loaded objects, not once per frame: a profile
 * of 16384 sites used to walk the objects (and read /proc/self/exe) 65540 times at start-up.
 * Scans run again when a module may have been loaded since (profile_sites.c); the table is
 * filled in the constructor and only its load state changes later, under the caller's lock. */
#define _GNU_SOURCE
#include "profile.h"

#include <link.h>
#include <stddef.h>
#include <string.h>

#define MODULES_MAX NIC_PROF_MODULES_MAX
#define NAMES_BYTES NIC_PROF_MODULE_NAMES_BYTES

struct module {
  uint64_t hash; /* of the base name */
  uint32_t name; /* offset in names */
  bool loaded;   /* set once; read without the lock */
  uintptr_t bias;
};

static struct module modules[MODULES_MAX];
static unsigned nmodules;
static char names[NAMES_BYTES];
static uint32_t names_used;

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static uint64_t name_hash(const char *name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *name; name++)
    h = (h ^ (unsigned char)*name) * 0x100000001b3ull;
  return h;
}

static int find(const char *base, uint64_t hash) {
  for (unsigned i = 0; i < nmodules; i++)
    if (modules[i].hash == hash && !strcmp(names + modules[i].name, base)) return (int)i;
  return -1;
}

int nic_prof_module_intern(const char *path) {
  const char *base = base_name(path);
  const uint64_t hash = name_hash(base);
  int id = find(base, hash);
  if (id >= 0) return id;
  const size_t len = strlen(base) + 1;
  if (nmodules == MODULES_MAX || len > NAMES_BYTES - names_used) return -1;
  memcpy(names + names_used, base, len);
  modules[nmodules] = (struct module){.hash = hash, .name = names_used};
  names_used += (uint32_t)len;
  return (int)nmodules++;
}

struct scan {
  unsigned found;
  unsigned long long loads;
};

static int note_loaded(struct dl_phdr_info *info, size_t size, void *arg) {
  struct scan *scan = arg;
  if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
    scan->loads = info->dlpi_adds;
  const char *base = base_name(nic_prof_object_name(info));
  const int id = find(base, name_hash(base));
  if (id >= 0 && !__atomic_load_n(&modules[id].loaded, __ATOMIC_RELAXED)) {
    modules[id].bias = info->dlpi_addr;
    __atomic_store_n(&modules[id].loaded, true, __ATOMIC_RELEASE);
    scan->found++;
  }
  return 0;
}

unsigned nic_prof_modules_scan(unsigned long long *loads) {
  struct scan scan = {0, 0};
  if (nmodules) dl_iterate_phdr(note_loaded, &scan);
  *loads = scan.loads;
  return scan.found;
}

bool nic_prof_module_loaded(int id, uintptr_t *bias) {
  if (id < 0 || (unsigned)id >= nmodules || !__atomic_load_n(&modules[id].loaded, __ATOMIC_ACQUIRE))
    return false;
  *bias = modules[id].bias;
  return true;
}

const char *nic_prof_module_name(int id) {
  return id >= 0 && (unsigned)id < nmodules ? names + modules[id].name : "?";
}
