/* mimalloc's commits and decommits reaching the interposed calls (interpose.c) where the symbol
 * table binds them elsewhere: nicmalloc loaded with dlopen, or after another allocator. */
#ifndef NIC_MIMALLOC_IMPORTS_H
#define NIC_MIMALLOC_IMPORTS_H

#include "imports.h"

#include <stdbool.h>

/* mmap, munmap, mprotect and madvise: the calls mimalloc makes to commit, decommit, reset and
 * free, as interpose.c defines them (the exported names may be bound to the C library's). */
#define NIC_OWN_CALLS 4
void nic_interpose_own_calls(struct nic_import calls[NIC_OWN_CALLS]);

/* Points libmimalloc's imports of those four at interpose.c's definitions, before it makes any
 * of them for nicmalloc. False (and a warning) when libmimalloc cannot be found, or imports one
 * of them no longer: its commits would then go unseen, so nicmalloc's blocks would look freed. */
bool nic_mimalloc_imports_redirect(void);

/* Points libmimalloc's madvise and mprotect imports at interpose.c's os_madvise and
 * os_mprotect whichever way nicmalloc was loaded (the constructor, before the program's main),
 * so that the exported calls know their callers are not mimalloc: a program's MADV_DONTNEED of a
 * live dataplane block was taken for a decommit, and its mprotect giving write access back to
 * dataplane pages for a commit (no system call: the pages stayed read-only). False when either
 * could not be (those calls are then taken for mimalloc's). */
bool nic_mimalloc_own_madvise(void);
/* Whether each was done (async-signal-safe). */
bool nic_mimalloc_madvise_apart(void);
bool nic_mimalloc_mprotect_apart(void);

/* mimalloc's decommit of control memory, made for it on the owner thread (heap/mi_decommit.h):
 * madvise(MADV_DONTNEED) as interpose.c's madvise makes it, page events and commit map included.
 * 0, or -1 with errno. */
int nic_mimalloc_decommit(void *addr, size_t len);

#endif
