/* C++ operator new and delete, every variant, written in C so the runtime needs no libstdc++.
 * Failure follows the standard: call the new-handler while one is installed, then throw
 * std::bad_alloc, or return NULL from the nothrow forms. Both are reached through weak
 * references that resolve when libstdc++ is in the process, which it always is when C++ calls
 * operator new. This file is built with -fexceptions so the exception can unwind through it. */
#define _GNU_SOURCE
#include "alloc_inline.h"
#include "cxx_operators.h"
#include "export.h"
#include "interposed.h"
#include "log.h"
#include "nicmalloc.h"
#include "site_table.h"
#include "thread.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*new_handler_fn)(void);
typedef void *(*new_fn)(size_t size);
typedef void *(*aligned_new_fn)(size_t size, size_t alignment);
typedef void *(*nothrow_new_fn)(size_t size, const void *nothrow_tag);
typedef void *(*aligned_nothrow_new_fn)(size_t size, size_t alignment, const void *nothrow_tag);
typedef void (*delete_fn)(void *p);
typedef void (*aligned_delete_fn)(void *p, size_t alignment);
extern new_handler_fn _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

static new_handler_fn new_handler(void) {
  return _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
}

/* Returns false when there is no handler left to try. */
static bool call_new_handler(void) {
  new_handler_fn handler = new_handler();
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

/* A request whose first try failed, tried again after each call of the handler. */
struct new_request {
  size_t size, alignment;
  enum nic_route route;
  bool site;          /* a new-expression the pass rewrote */
  const void *caller; /* where the program's call returns to, which NICMALLOC_SITES tests */
};

static void *try_again(const struct new_request *r) {
  if (r->site) return site_try(r->size, r->alignment, r->route);
  if (r->alignment || r->route != NIC_ROUTE_AUTO)
    return nic_alloc(r->size, r->alignment, false, r->route);
  return nic_alloc_auto_general(r->size, false, r->caller);
}

/* The throwing forms' loop; an exception the handler throws goes on through it. */
static void *handler_loop(const struct new_request *r) {
  while (call_new_handler()) {
    void *p = try_again(r);
    if (p) return p;
  }
  throw_bad_alloc(r->size);
}

/* A nothrow form must return NULL when the handler throws, and C cannot catch. The C++
 * runtime's own operator new(size_t, const std::nothrow_t &) can: it calls operator new(size_t),
 * nicmalloc's, in a try block that makes anything thrown a NULL result. So a nothrow request
 * that failed, with a handler installed, is handed to it as operator new(SIZE_MAX), which no
 * allocator serves, and the request set here on the thread is what that call then serves, with
 * the handler loop of the throwing forms: whatever it throws ends in the runtime's catch. */
static __thread struct new_request *handed_over;

/* The C++ runtime's own definition of op (cxx_operators.h). */
static void *runtime_operator(enum nic_cxx_op op) {
  NIC_INTERNAL_SCOPE();
  return nic_cxx_runtime_operator(op);
}

static void *nothrow_failed(struct new_request *r) {
  if (!new_handler()) return NULL;
  void *const found = runtime_operator(NIC_CXX_NEW_NOTHROW);
  const nothrow_new_fn runtime = *(const nothrow_new_fn *)&found;
  if (!runtime) { /* the handler runs here, and what it throws leaves this operator */
    while (call_new_handler()) {
      void *p = try_again(r);
      if (p) return p;
    }
    return NULL;
  }
  static const char nothrow_tag; /* the runtime does not read it */
  struct new_request *const outer = handed_over;
  handed_over = r;
  void *p = runtime(SIZE_MAX, &nothrow_tag);
  const bool served = handed_over != r;
  handed_over = outer;
  /* Not served: the runtime's operator new is not nicmalloc's here, and its own loop ran the
   * handler on SIZE_MAX; one more try of the request itself. */
  return served ? p : try_again(r);
}

/* Out of line, so that the fast paths keep no request on their stacks. */
__attribute__((noinline, cold)) static void *new_failed(size_t size, size_t alignment,
                                                        enum nic_route route, bool site,
                                                        const void *caller, bool nothrow) {
  struct new_request r = {size, alignment, route, site, caller};
  if (nothrow) return nothrow_failed(&r);
  struct new_request *const handed = handed_over;
  if (__builtin_expect(handed != NULL, 0) && size == SIZE_MAX && !site && !alignment &&
      route == NIC_ROUTE_AUTO) {
    handed_over = NULL; /* the handler's own requests are its own */
    void *p = try_again(handed);
    return p ? p : handler_loop(handed);
  }
  return handler_loop(&r);
}

static void *new_impl(size_t size, size_t alignment, bool nothrow, enum nic_route route) {
  void *p = alignment || route != NIC_ROUTE_AUTO ? nic_alloc(size, alignment, false, route)
                                                 : nic_alloc_auto(size, false);
  if (__builtin_expect(p != NULL, 1)) return p;
  return new_failed(size, alignment, route, false, __builtin_return_address(0), nothrow);
}

/* The same for the new-expressions the pass rewrote. */
static void *site_new_impl(size_t size, size_t alignment, bool nothrow, enum nic_route route) {
  void *p = site_try(size, alignment, route);
  if (__builtin_expect(p != NULL, 1)) return p;
  return new_failed(size, alignment, route, true, NULL, nothrow);
}

/* operator new(size, align_val_t): an alignment that is not a power of two is undefined
 * behaviour in C++, and the allocator would round it to a mask, handing out a block aligned to
 * something else. libstdc++'s operators refuse it at once, without the new-handler (which cannot
 * make such a request possible): std::bad_alloc, or NULL from the nothrow forms. So do these;
 * only the aligned forms pay for the test. */
static bool bad_alignment(size_t al) {
  return !al || (al & (al - 1));
}

__attribute__((cold)) static void *refuse_alignment(size_t size, bool nothrow) {
  if (!nothrow) throw_bad_alloc(size);
  errno = EINVAL; /* as aligned_alloc says it */
  return NULL;
}

static void *aligned_new(size_t size, size_t alignment, bool nothrow) {
  if (__builtin_expect(bad_alignment(alignment), 0)) return refuse_alignment(size, nothrow);
  return new_impl(size, alignment, nothrow, NIC_ROUTE_AUTO);
}

/* Where the program replaced operators of a family (cxx_operators.h), nicmalloc's definitions of
 * the family's other forms are the standard's default ones, which call the form the standard
 * names, wherever the program's calls of it go: new[] calls new, a sized, nothrow or array
 * delete calls delete, a sized or nothrow delete[] calls delete[]. The nothrow news call the C++
 * runtime's own, which call new or new[] inside the catch C cannot write. The basic new and
 * delete of each family call nothing: where they are reached, they were called as nicmalloc's.
 * Each form tests its family's bit (one load) and hands the rest to these, out of line. */
static unsigned replaced_families(void) {
  unsigned families = __atomic_load_n(&nic_cxx_replaced, __ATOMIC_ACQUIRE);
  if (families & NIC_CXX_NOT_LOOKED) {
    NIC_INTERNAL_SCOPE(); /* the dynamic linker's lookups allocate */
    families = nic_cxx_replaced_families();
  }
  return families;
}

/* What the program's call of op reaches, where op's family is replaced; else NULL. */
static void *program_operator(enum nic_cxx_op op) {
  return replaced_families() & nic_cxx_family(op) ? nic_cxx_program_operator(op) : NULL;
}

static bool is_aligned(enum nic_cxx_op op) {
  return op >= NIC_CXX_ALIGNED;
}

/* new[] (aligned or not), calling new. */
__attribute__((noinline, cold)) static void *array_new_replaced(size_t size, size_t alignment,
                                                                bool aligned) {
  void *to = program_operator(aligned ? NIC_CXX_ALIGNED + NIC_CXX_NEW : NIC_CXX_NEW);
  if (!to)
    return aligned ? aligned_new(size, alignment, false) : new_impl(size, 0, false, NIC_ROUTE_AUTO);
  if (!aligned) return (*(new_fn *)&to)(size);
  return (*(aligned_new_fn *)&to)(size, alignment);
}

/* A nothrow new (op), calling throwing, its throwing form, in the runtime's catch. Without the
 * runtime, throwing is called here, and what it throws leaves this operator. */
__attribute__((noinline, cold)) static void *nothrow_new_replaced(enum nic_cxx_op op,
                                                                  enum nic_cxx_op throwing,
                                                                  size_t size, size_t alignment,
                                                                  const void *tag) {
  const bool aligned = is_aligned(op);
  if (replaced_families() & nic_cxx_family(op)) {
    void *to = runtime_operator(op);
    if (to) {
      if (!aligned) return (*(nothrow_new_fn *)&to)(size, tag);
      return (*(aligned_nothrow_new_fn *)&to)(size, alignment, tag);
    }
    to = program_operator(throwing);
    if (to && !aligned) return (*(new_fn *)&to)(size);
    if (to) return (*(aligned_new_fn *)&to)(size, alignment);
  }
  return aligned ? aligned_new(size, alignment, true) : new_impl(size, 0, true, NIC_ROUTE_AUTO);
}

/* A delete that calls delete or delete[] (target); name is its own, for reports. */
__attribute__((noinline, cold)) static void delete_replaced(enum nic_cxx_op target, void *p,
                                                            size_t alignment, const char *name) {
  void *to = program_operator(target);
  if (!to)
    nic_free_inline(p, name);
  else if (!is_aligned(target))
    (*(delete_fn *)&to)(p);
  else
    (*(aligned_delete_fn *)&to)(p, alignment);
}

#define UNALIGNED_REPLACED nic_cxx_maybe_replaced(NIC_CXX_UNALIGNED_FAMILY)
#define ALIGNED_REPLACED nic_cxx_maybe_replaced(NIC_CXX_ALIGNED_FAMILY)

NIC_EXPORT void *_Znwm(size_t n) {
  return new_impl(n, 0, false, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_Znam(size_t n) {
  if (UNALIGNED_REPLACED) return array_new_replaced(n, 0, false);
  return new_impl(n, 0, false, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *nt) {
  if (UNALIGNED_REPLACED) return nothrow_new_replaced(NIC_CXX_NEW_NOTHROW, NIC_CXX_NEW, n, 0, nt);
  return new_impl(n, 0, true, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *nt) {
  if (UNALIGNED_REPLACED)
    return nothrow_new_replaced(NIC_CXX_NEW_ARRAY_NOTHROW, NIC_CXX_NEW_ARRAY, n, 0, nt);
  return new_impl(n, 0, true, NIC_ROUTE_AUTO);
}
NIC_EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t al) {
  return aligned_new(n, al, false);
}
NIC_EXPORT void *_ZnamSt11align_val_t(size_t n, size_t al) {
  if (ALIGNED_REPLACED) return array_new_replaced(n, al, true);
  return aligned_new(n, al, false);
}
NIC_EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *nt) {
  if (ALIGNED_REPLACED)
    return nothrow_new_replaced(NIC_CXX_ALIGNED + NIC_CXX_NEW_NOTHROW,
                                NIC_CXX_ALIGNED + NIC_CXX_NEW, n, al, nt);
  return aligned_new(n, al, true);
}
NIC_EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *nt) {
  if (ALIGNED_REPLACED)
    return nothrow_new_replaced(NIC_CXX_ALIGNED + NIC_CXX_NEW_ARRAY_NOTHROW,
                                NIC_CXX_ALIGNED + NIC_CXX_NEW_ARRAY, n, al, nt);
  return aligned_new(n, al, true);
}

/* The new-expressions the pass rewrote. Each site takes its operator's arguments (the nothrow tag
 * included, unused) plus the site id, so the pass only appends an argument. */
static void *site_new(size_t size, size_t alignment, bool aligned, bool nothrow, uint32_t site) {
  if (aligned && __builtin_expect(bad_alignment(alignment), 0))
    return refuse_alignment(size, nothrow);
  return site_new_impl(size, alignment, nothrow, nic_site_route(site));
}

/* Where the program replaced the operators of a site's family, the site allocates as its
 * new-expression would have, through the operator (op) the program's call reached: the
 * program's delete takes only what its own operators made. */
__attribute__((noinline, cold)) static void *
site_replaced(enum nic_cxx_op op, size_t size, size_t alignment, const void *tag, uint32_t site) {
  const bool aligned = is_aligned(op);
  const enum nic_cxx_op form = aligned ? op - NIC_CXX_ALIGNED : op;
  const bool nothrow = form == NIC_CXX_NEW_NOTHROW || form == NIC_CXX_NEW_ARRAY_NOTHROW;
  void *to = program_operator(op);
  if (!to) return site_new(size, alignment, aligned, nothrow, site);
  nic_log_fallback_once(false, "the program replaces C++'s global operator new or delete: the "
                               "new-expressions the LLVM pass rewrote allocate through its "
                               "operators, not in dataplane memory");
  if (!aligned && !nothrow) return (*(new_fn *)&to)(size);
  if (!aligned) return (*(nothrow_new_fn *)&to)(size, tag);
  if (!nothrow) return (*(aligned_new_fn *)&to)(size, alignment);
  return (*(aligned_nothrow_new_fn *)&to)(size, alignment, tag);
}

NIC_EXPORT void *nic_new_site(size_t size, uint32_t site) {
  if (UNALIGNED_REPLACED) return site_replaced(NIC_CXX_NEW, size, 0, NULL, site);
  return site_new(size, 0, false, false, site);
}
NIC_EXPORT void *nic_new_array_site(size_t size, uint32_t site) {
  if (UNALIGNED_REPLACED) return site_replaced(NIC_CXX_NEW_ARRAY, size, 0, NULL, site);
  return site_new(size, 0, false, false, site);
}
NIC_EXPORT void *nic_new_nothrow_site(size_t size, const void *nothrow_tag, uint32_t site) {
  if (UNALIGNED_REPLACED) return site_replaced(NIC_CXX_NEW_NOTHROW, size, 0, nothrow_tag, site);
  return site_new(size, 0, false, true, site);
}
NIC_EXPORT void *nic_new_array_nothrow_site(size_t size, const void *nothrow_tag, uint32_t site) {
  if (UNALIGNED_REPLACED)
    return site_replaced(NIC_CXX_NEW_ARRAY_NOTHROW, size, 0, nothrow_tag, site);
  return site_new(size, 0, false, true, site);
}
NIC_EXPORT void *nic_new_aligned_site(size_t size, size_t alignment, uint32_t site) {
  if (ALIGNED_REPLACED)
    return site_replaced(NIC_CXX_ALIGNED + NIC_CXX_NEW, size, alignment, NULL, site);
  return site_new(size, alignment, true, false, site);
}
NIC_EXPORT void *nic_new_array_aligned_site(size_t size, size_t alignment, uint32_t site) {
  if (ALIGNED_REPLACED)
    return site_replaced(NIC_CXX_ALIGNED + NIC_CXX_NEW_ARRAY, size, alignment, NULL, site);
  return site_new(size, alignment, true, false, site);
}
NIC_EXPORT void *nic_new_aligned_nothrow_site(size_t size, size_t alignment,
                                              const void *nothrow_tag, uint32_t site) {
  if (ALIGNED_REPLACED)
    return site_replaced(NIC_CXX_ALIGNED + NIC_CXX_NEW_NOTHROW, size, alignment, nothrow_tag, site);
  return site_new(size, alignment, true, true, site);
}
NIC_EXPORT void *nic_new_array_aligned_nothrow_site(size_t size, size_t alignment,
                                                    const void *nothrow_tag, uint32_t site) {
  if (ALIGNED_REPLACED)
    return site_replaced(NIC_CXX_ALIGNED + NIC_CXX_NEW_ARRAY_NOTHROW, size, alignment, nothrow_tag,
                         site);
  return site_new(size, alignment, true, true, site);
}

NIC_EXPORT void _ZdlPv(void *p) {
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPv(void *p) {
  if (UNALIGNED_REPLACED) {
    delete_replaced(NIC_CXX_DELETE, p, 0, "operator delete[]");
    return;
  }
  nic_free_inline(p, "operator delete[]");
}
NIC_EXPORT void _ZdlPvm(void *p, size_t n) {
  (void)n;
  if (UNALIGNED_REPLACED) {
    delete_replaced(NIC_CXX_DELETE, p, 0, "operator delete");
    return;
  }
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPvm(void *p, size_t n) {
  (void)n;
  if (UNALIGNED_REPLACED) {
    delete_replaced(NIC_CXX_DELETE_ARRAY, p, 0, "operator delete[]");
    return;
  }
  nic_free_inline(p, "operator delete[]");
}
NIC_EXPORT void _ZdlPvSt11align_val_t(void *p, size_t al) {
  (void)al;
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPvSt11align_val_t(void *p, size_t al) {
  if (ALIGNED_REPLACED) {
    delete_replaced(NIC_CXX_ALIGNED + NIC_CXX_DELETE, p, al, "operator delete[]");
    return;
  }
  nic_free_inline(p, "operator delete[]");
}
NIC_EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) {
  (void)n;
  if (ALIGNED_REPLACED) {
    delete_replaced(NIC_CXX_ALIGNED + NIC_CXX_DELETE, p, al, "operator delete");
    return;
  }
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) {
  (void)n;
  if (ALIGNED_REPLACED) {
    delete_replaced(NIC_CXX_ALIGNED + NIC_CXX_DELETE_ARRAY, p, al, "operator delete[]");
    return;
  }
  nic_free_inline(p, "operator delete[]");
}
NIC_EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *nt) {
  (void)nt;
  if (UNALIGNED_REPLACED) {
    delete_replaced(NIC_CXX_DELETE, p, 0, "operator delete");
    return;
  }
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *nt) {
  (void)nt;
  if (UNALIGNED_REPLACED) {
    delete_replaced(NIC_CXX_DELETE_ARRAY, p, 0, "operator delete[]");
    return;
  }
  nic_free_inline(p, "operator delete[]");
}
NIC_EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) {
  (void)nt;
  if (ALIGNED_REPLACED) {
    delete_replaced(NIC_CXX_ALIGNED + NIC_CXX_DELETE, p, al, "operator delete");
    return;
  }
  nic_free_inline(p, "operator delete");
}
NIC_EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *nt) {
  (void)nt;
  if (ALIGNED_REPLACED) {
    delete_replaced(NIC_CXX_ALIGNED + NIC_CXX_DELETE_ARRAY, p, al, "operator delete[]");
    return;
  }
  nic_free_inline(p, "operator delete[]");
}
