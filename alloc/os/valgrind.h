/* Running under Valgrind. Memcheck shadows the address space a program maps: it spends about
 * 45 s and 5 GiB of its own memory on a 4 TiB PROT_NONE reservation above its direct map (64 GiB
 * cost 1.4 s; the other tools under 0.6 s), so the control arena is reserved at its smallest
 * there (vspace.c), and only there: the instruction counts of bench/ run under callgrind and
 * cachegrind, which must see the allocator as it runs natively. And
 * Valgrind replaces the malloc family in every library that exports it, libnicmalloc's and
 * libmimalloc's included: the program's heap is then Valgrind's, and mi_free, an alias of
 * libmimalloc's free, is Valgrind's too, which calls nicmalloc's dataplane blocks invalid
 * (memcheck) or aborts on them (massif): they are kept when freed (core/alloc.c), never reused.
 * That is said once at start-up, with the option that keeps nicmalloc's allocator
 * (--soname-synonyms=somalloc=nouserintercepts). */
#ifndef NIC_VALGRIND_H
#define NIC_VALGRIND_H

#include <stdbool.h>

bool nic_under_valgrind(void);
/* Under Valgrind's memcheck. */
bool nic_under_memcheck(void);

/* Under Valgrind, whether it replaced mimalloc's malloc family; set at start-up, before the
 * dataplane exists. Start-up steps that would free blocks of nicmalloc's own skip them then. */
extern bool nic_valgrind_took_malloc __attribute__((visibility("hidden")));

/* Start-up, once the control arena is in place: looks whether Valgrind took the malloc family
 * (a block from mi_malloc outside mimalloc's arenas) and says what follows. */
void nic_valgrind_check(void);

#endif
