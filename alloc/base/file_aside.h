/* A file replaced whole (file_aside.c): a new one is written next to it under a fresh name, then
 * renamed over it, so that the path holds the old file or the new one, never a part of one,
 * whenever the writer dies. */
#ifndef NIC_FILE_ASIDE_H
#define NIC_FILE_ASIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* Descriptors a writer holds while it replaces a file (the directory, the current file, the new
 * one) are noted, so that a forked child closes its copies: a child's copy of a locked file's
 * descriptor would hold the lock for as long as it lives. A descriptor is opened and noted under
 * one lock (nic_aside_lock), which fork takes: never held across anything that blocks. */
void nic_aside_lock(void);
void nic_aside_unlock(void);
/* nic_aside_lock, which may give up under nic_bounded_begin (bounded_lock.h): false then. */
bool nic_aside_lock_bounded(void);
/* Under the lock: notes fd when it is a descriptor, and returns it. */
int nic_aside_note(int fd);
/* Closes a noted descriptor (nothing when fd < 0). */
void nic_aside_close(int fd);

/* The bytes the new file's name adds to the name of the file it replaces: ".NAME.<16 hex>.tmp". */
#define NIC_ASIDE_NAME_EXTRA 22

/* A new file next to name in dirfd, ".NAME.<16 hex>.tmp", created exclusively and never through a
 * link (whatever another user planted under a name makes us pick another), noted; its name in
 * tmp. It takes the mode of the file it replaces (cur; NULL when there is none, 0644 less the
 * umask then): a rewrite must not open a file its owner closed. -1 with errno when none can be
 * made. */
int nic_aside_create(int dirfd, const char *name, char *tmp, size_t cap, const struct stat *cur);

/* Removes the new files of writers that were killed before they renamed them: ours, regular,
 * named as nic_aside_create names them for name, and older than any write takes (a minute).
 * Without malloc. */
void nic_aside_remove_stale(int dirfd, const char *name);

#endif
