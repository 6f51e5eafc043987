/* C++ operator new and delete, every variant, written in C so the runtime needs no libstdc++.
 * Failure follows the standard: call the new-handler while one is installed, then throw
 * std::bad_alloc. Both are reached through weak references that resolve when libstdc++ is in the
 * process, which it always is when C++ calls operator new. This file is built with -fexceptions
 * so the exception can unwind through it. */
#include "alloc_inline.h"
#include "export.h"
#include "interposed.h"
#include "log.h"
#include "nicmalloc.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*new_handler_fn)(void);
extern new_handler_fn _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

/* Returns false when there is no handler left to try. */
static bool call_new_handler(void) {
  new_handler_fn handler = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
  if (!handler) return false;
  handler();
  return true;
}

__attribute__((noreturn)) static void throw_bad_alloc(size_t size) {
  if (_ZSt17__throw_bad_allocv) _ZSt17__throw_bad_allocv();
  nic_fatal("operator new(%zu) failed and std::bad_alloc cannot be thrown here", size);
}

/* One try of a new-expression the pass rewrote: from the program's malloc family where nicmalloc
 * is not the malloc (its delete ends in the program's free: sites.c), else from nicmalloc. */
static void *site_try(size_t size, size_t alignment, enum nic_route route) {
  const struct nic_program_alloc *program = nic_program_alloc();
  if (__builtin_expect(program != NULL, 0) && program->malloc &&
      (!alignment || program->posix_memalign)) {
    if (!alignment) return program->malloc(size);
    void *p = NULL;
    return program->posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment,
                                   size)
               ? NULL
               : p;
  }
  return nic_alloc(size, alignment, false, route);
}

static void *new_impl(size_t size, size_t alignment, bool nothrow, enum nic_route route) {
  for (;;) {
    void *p = alignment || route != NIC_ROUTE_AUTO ? nic_alloc(size, alignment, false, route)
                                                   : nic_alloc_auto(size, false);
    if (__builtin_expect(p != NULL, 1)) return p;
    if (nothrow) return NULL;
    if (!call_new_handler()) throw_bad_alloc(size);
  }
}

/* The same for the new-expressions the pass rewrote. */
static void *site_new_impl(size_t size, size_t alignment, bool nothrow, enum nic_route route) {
  for (;;) {
    void *p = site_try(size, alignment, route);
    if (__builtin_expect(p != NULL, 1)) return p;
    if (nothrow) return NULL;
    if (!call_new_handler()) throw_bad_alloc(size);
  }
}

NIC_EXPORT void *_Znwm(size_t n) {
  return new_impl(n, 0, false, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_Znam(size_t n) {
  return new_impl(n, 0, false, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *nt) {
  (void)nt;
  return new_impl(n, 0, true, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *nt) {
  (void)nt;
  return new_impl(n, 0, true, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t al) {
  return new_impl(n, al, false, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_ZnamSt11align_val_t(size_t n, size_t al) {
  return new_impl(n, al, false, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *nt) {
  (void)nt;
  return new_impl(n, al, true, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *nt) {
  (void)nt;
  return new_impl(n, al, true, NIC_ROUTE_AUTO);
}

/* nic_new_site: operator new semantics for the LLVM pass's rewritten new-expressions. */
void *nic_new_routed(size_t size, enum nic_route route) {
  return site_new_impl(size, 0, false, route);
}

/* The other new-expressions the pass rewrites. Each takes the original operator's arguments
 * (the nothrow tag included, unused) plus the site id, so the pass only appends an argument.
 * The site's switch is read through the public query: sites.c keeps the table. */
static enum nic_route site_route(uint32_t site) {
  return nic_site_is_enabled(site) == 1 ? NIC_ROUTE_DATAPLANE : NIC_ROUTE_AUTO;
}

/* operator new(size, align_val_t): an alignment that is not a power of two is undefined
 * behaviour in C++; treat it as an allocation failure rather than pass it on. */
static bool bad_alignment(size_t al) {
  return !al || (al & (al - 1));
}

NIC_EXPORT void *nic_new_aligned_site(size_t size, size_t alignment, uint32_t site) {
  if (bad_alignment(alignment)) throw_bad_alloc(size);
  return site_new_impl(size, alignment, false, site_route(site));
}
NIC_EXPORT void *nic_new_nothrow_site(size_t size, const void *nothrow_tag, uint32_t site) {
  (void)nothrow_tag;
  return site_new_impl(size, 0, true, site_route(site));
}
NIC_EXPORT void *nic_new_aligned_nothrow_site(size_t size, size_t alignment,
                                              const void *nothrow_tag, uint32_t site) {
  (void)nothrow_tag;
  if (bad_alignment(alignment)) {
    errno = EINVAL; /* as aligned_alloc says it */
    return NULL;
  }
  return site_new_impl(size, alignment, true, site_route(site));
}

NIC_EXPORT void _ZdlPv(void *p) {
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPv(void *p) {
  nic_free_inline(p, "operator delete[]");
}
NIC_EXPORT void _ZdlPvm(void *p, size_t n) {
  (void)n;
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPvm(void *p, size_t n) {
  (void)n;
  nic_free_inline(p, "operator delete[]");
}
NIC_EXPORT void _ZdlPvSt11align_val_t(void *p, size_t al) {
  (void)al;
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPvSt11align_val_t(void *p, size_t al) {
  (void)al;
  nic_free_inline(p, "operator delete[]");
}
NIC_EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) {
  (void)n, (void)al;
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) {
  (void)n, (void)al;
  nic_free_inline(p, "operator delete[]");
}
NIC_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nt) {
  (void)nt;
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *nt) {
  (void)nt;
  nic_free_inline(p, "operator delete[]");
}
NIC_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) {
  (void)al, (void)nt;
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) {
  (void)al, (void)nt;
  nic_free_inline(p, "operator delete[]");
}
