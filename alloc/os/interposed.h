/* Whether nicmalloc is the program's malloc (interposed.c). */
#ifndef NIC_INTERPOSED_H
#define NIC_INTERPOSED_H

#include <stdbool.h>
#include <stddef.h>

/* Looks once, from the library's constructor, before start-up: when the names malloc and free
 * are bound to another object's definitions (nicmalloc loaded with dlopen, or after another
 * allocator), says so once and points mimalloc's commit calls at nicmalloc's
 * (mimalloc_imports.h). */
void nic_interposed_check(void);

/* True unless nic_interposed_check found the names bound elsewhere. Then the program's frees,
 * unmaps and page drops go by unseen: memory that is not nicmalloc's is not registered (a
 * registration of it could outlive its pages unnoticed) and posts copy it. */
bool nic_malloc_interposed(void);

/* Where nicmalloc is not the program's malloc, the program's malloc family (the definitions its
 * free belongs with); NULL where it is. Code compiled with the LLVM pass keeps its own frees, so
 * the pass's sites allocate from these there (alloc/api/sites.c). A member is NULL when no
 * definition other than nicmalloc's was found. */
struct nic_program_alloc {
  void *(*malloc)(size_t size);
  void *(*calloc)(size_t count, size_t size);
  void *(*realloc)(void *p, size_t size);
  int (*posix_memalign)(void **out, size_t alignment, size_t size);
};
const struct nic_program_alloc *nic_program_alloc(void);

/* The loaded object that holds addr (NULL: none), found by its address range, where dladdr would
 * read the object's symbol table through. */
struct link_map *nic_object_of(const void *addr);

/* Whether the calls the program and its libraries make to name (a function) reach the definition
 * in the object that holds this code, through the program's own entry for it where a program
 * built without PIE has one. *bound: what dlsym answers for name, which calls reach in either
 * case. True when nothing defines name. */
bool nic_calls_reach_here(const char *name, void **bound);

/* Set on the calling thread by nicmalloc's free when given NULL and by its malloc when asked for
 * SIZE_MAX bytes (which every allocator refuses): how nic_interposed_check learns whether a call
 * through the program's own entry for the name (a program built without PIE) ends here. */
extern __thread bool nic_probe_free_seen, nic_probe_malloc_seen;

#endif
