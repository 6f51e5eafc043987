/* libunwind, loaded by the features that walk or name stacks (NICMALLOC_PROFILE,
 * NICMALLOC_SITES, NICMALLOC_FENCE=detect's reports) when they start. Linked, it and liblzma
 * would be mapped, and partly resident, in every process that preloads the library. */
#ifndef NIC_UNWIND_H
#define NIC_UNWIND_H

#ifndef UNW_LOCAL_ONLY
#define UNW_LOCAL_ONLY
#endif
#include <libunwind.h>
#include <stdbool.h>

struct nic_unwind {
  int (*backtrace)(void **frames, int max);
  int (*getcontext)(unw_context_t *context);
  int (*init_local)(unw_cursor_t *cursor, unw_context_t *context);
  int (*set_reg)(unw_cursor_t *cursor, unw_regnum_t reg, unw_word_t value);
  int (*get_proc_name)(unw_cursor_t *cursor, char *name, size_t cap, unw_word_t *offset);
};

/* Null until nic_unwind_load has succeeded. */
const struct nic_unwind *nic_unwind_get(void);

/* Points libunwind's own pipe2, read and syscall imports at nicmalloc's, so that it tests
 * addresses without keeping a pipe on the program's descriptors (unwind_imports.c). False when
 * it does not import all three: it would then keep its pipe. */
bool nic_unwind_redirect_imports(void *handle);

/* Loads libunwind once; false (and a warning, once) when it cannot. It allocates: call it only
 * outside the allocation paths (profile.c calls it from the library's constructor). */
bool nic_unwind_load(void);

#endif
