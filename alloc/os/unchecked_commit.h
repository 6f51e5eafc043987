/* mimalloc 2.0.9 commits a huge block's segment (over 16 MiB) in its arena without looking at the
 * answer (src/arena.c), and then writes the segment's header into it. In the control arena, which
 * is reserved inaccessible and committed with mprotect, a refused commit was a SIGSEGV inside
 * malloc: under vm.overcommit_memory=2 past the commit limit, or under RLIMIT_DATA (ulimit -d),
 * where glibc's and mimalloc's own malloc return NULL. */
#ifndef NIC_UNCHECKED_COMMIT_H
#define NIC_UNCHECKED_COMMIT_H

#include <stdbool.h>
#include <stddef.h>

/* Whether the kernel would commit len more bytes of private writable memory now, asked the way
 * the control arena's commit asks (a mapping made, never touched, and unmapped at once): false
 * under the overcommit limit or RLIMIT_DATA; where RLIMIT_AS, which the commit does not meet,
 * refused that mapping, those two are asked from /proc instead. Before a fresh huge block, which
 * then gets ENOMEM instead; another thread or process may still take the room between the two. */
bool nic_commit_room(size_t len);

/* The bytes of arena mimalloc commits for a huge block of size bytes: its segment's header and
 * the block, in whole 32 MiB arena blocks. */
size_t nic_huge_commit_bytes(size_t size);

/* True on a thread while nicmalloc asks mimalloc for a huge control block (whose segment's
 * commit mimalloc will not check), so that a refusal of the program's own mprotect is never
 * taken for one. */
extern __thread bool nic_huge_commit_expected __attribute__((tls_model("initial-exec")));

/* From the interposed mprotect, when a commit of [addr, addr + len) was refused (errno err):
 * where it is the one mimalloc does not check (a huge block's segment being made: in the control
 * arena, whole arena blocks), it says so and aborts, since mimalloc's next write there would be a
 * SIGSEGV with no word of why. */
void nic_commit_refused(void *addr, size_t len, int err);

#endif
