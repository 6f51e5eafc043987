/* Tables the linker gathers. An entry is defined next to the code it names, in a section of
 * its own table; the linker puts the entries of every object side by side and marks the two
 * ends (__start_<section>, __stop_<section>). A lower layer walks the table without knowing
 * who put what in it, so a higher layer plugs in without an upward call: no malloc, no
 * start-up order, and no hand list to forget an entry in. The fork-lock registry (forklock.h),
 * the start-up steps (startup.h), the memory watchers (events.h) and the backends
 * (regcache/cache/backend.h) are such tables. */
#ifndef NIC_REGISTRY_H
#define NIC_REGISTRY_H

/* Weak, so that a link without any entry still works (both ends are then NULL); hidden, so that
 * no other module's table of the same name stands in for ours. */
#define NIC_REGISTRY_DECLARE(type, table)                                                          \
  extern const type __start_##table[] __attribute__((weak, visibility("hidden")));                 \
  extern const type __stop_##table[] __attribute__((weak, visibility("hidden")))

/* Entries are arrays of one struct type, pointer-aligned, so that the table is an array. */
#define NIC_REGISTRY_ENTRY(table) __attribute__((used, section(#table), aligned(sizeof(void *))))

#define NIC_REGISTRY_EACH(type, table, e)                                                          \
  for (const type *e = __start_##table; e < __stop_##table; e++)

#endif
