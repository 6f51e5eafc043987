/* Pointing another shared object's own imports (its GOT entries) at functions of ours: nobody
 * else's calls change. x86-64 relocations only, as the whole project. */
#ifndef NIC_IMPORTS_H
#define NIC_IMPORTS_H

#include <link.h>
#include <stdbool.h>

struct nic_import {
  const char *name; /* the imported function */
  void *to;         /* what its calls reach from now on */
  bool done;        /* set when the object imports it (and the entry now points at to) */
};

/* Redirects every entry of imports that the object of map imports; the entries it does not
 * import keep done false. False when the object's dynamic section cannot be read. */
bool nic_imports_redirect(const struct link_map *map, struct nic_import *imports, unsigned n);

#endif
