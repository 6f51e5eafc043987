/* The allocation-site ABI the LLVM pass emits: a site allocates dataplane memory while its bit
 * in the site table is on (every site starts on). */
#include "alloc_inline.h"
#include "api_errors.h"
#include "export.h"
#include "interposed.h"
#include "log.h"
#include "nicmalloc.h"
#include "site_table.h"

#include <errno.h>

/* Where nicmalloc is not the program's malloc (loaded with dlopen: interposed.h), the code the
 * pass compiled still frees with the program's free, which would abort on nicmalloc's blocks:
 * its sites then allocate from the program's malloc family (no dataplane memory there, as the
 * load-time message says). NULL where nicmalloc is the malloc. */
static const struct nic_program_alloc *program_alloc(void) {
  const struct nic_program_alloc *program = nic_program_alloc();
  return __builtin_expect(program != NULL, 0) && program->malloc ? program : NULL;
}

NIC_EXPORT void *nic_malloc_site(size_t size, uint32_t site) {
  const struct nic_program_alloc *program = program_alloc();
  if (program) return program->malloc(size);
  return nic_alloc(size, 0, false, nic_site_route(site));
}

NIC_EXPORT void *nic_calloc_site(size_t count, size_t size, uint32_t site) {
  size_t total;
  const struct nic_program_alloc *program = program_alloc();
  if (program && program->calloc) return program->calloc(count, size);
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return nic_alloc(total, 0, true, nic_site_route(site));
}

NIC_EXPORT void *nic_realloc_site(void *p, size_t size, uint32_t site) {
  const struct nic_program_alloc *program = program_alloc();
  if (program && program->realloc) return program->realloc(p, size);
  return nic_realloc_routed(p, size, nic_site_route(site), "nic_realloc_site");
}

NIC_EXPORT void *nic_aligned_alloc_site(size_t alignment, size_t size, uint32_t site) {
  if (!alignment || (alignment & (alignment - 1))) {
    errno = EINVAL;
    return NULL;
  }
  const struct nic_program_alloc *program = program_alloc();
  if (program && program->posix_memalign) {
    void *p = NULL;
    /* posix_memalign asks for a multiple of sizeof(void *); any larger power of two serves */
    const int rc =
        program->posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment, size);
    if (rc) errno = rc;
    return rc ? NULL : p;
  }
  return nic_alloc(size, alignment, false, nic_site_route(site));
}

NIC_EXPORT int nic_posix_memalign_site(void **out, size_t alignment, size_t size, uint32_t site) {
  if (!out) {
    nic_api_error(other, "nic_posix_memalign_site(NULL, %zu, %zu, %u): nowhere to store the block",
                  alignment, size, site);
    return EINVAL;
  }
  if (!alignment || (alignment & (alignment - 1)) || alignment % sizeof(void *)) {
    nic_api_error(other,
                  "nic_posix_memalign_site(%p, %zu, %zu, %u): the alignment is not a power of two "
                  "multiple of sizeof(void *)",
                  (void *)out, alignment, size, site);
    return EINVAL;
  }
  const struct nic_program_alloc *program = program_alloc();
  int rc = 0;
  if (program && program->posix_memalign) {
    rc = program->posix_memalign(out, alignment, size);
  } else {
    void *p = nic_alloc(size, alignment, false, nic_site_route(site));
    if (p)
      *out = p;
    else
      rc = ENOMEM;
  }
  /* Counted, as every error this call returns; not said, as the malloc family says nothing of a
   * request it cannot serve. */
  if (rc) nic_api_count(other);
  return rc;
}
