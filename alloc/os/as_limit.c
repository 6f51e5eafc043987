/* An address-space limit lowered while the program runs. nicmalloc reserves its address space
 * at start-up (the control arena, up to 4 TiB) and when the dataplane is first used (the chunks'
 * range), never committed; under a limit set before the program starts (ulimit -v, prlimit
 * before exec) it takes only what the limit leaves (vspace.c). The kernel counts reserved space
 * against RLIMIT_AS all the same, so a program that lowers the limit below what the process maps,
 * where nicmalloc's reservations are what puts it over, can map nothing more: its mmap calls fail
 * with ENOMEM and its threads cannot start (their stacks are mappings), while malloc goes on
 * inside the arena. The reservations cannot be given back under mimalloc's feet.
 *
 * So setrlimit and prlimit are interposed to note such a limit, and the first mapping refused
 * under it (an interposed mmap or mremap: interpose.c) says why, once, with the way out. Not the
 * setrlimit itself: a shell's ulimit -v, or any launcher, lowers the limit in the process that
 * then execs the program, where the limit does what was meant. Thread stacks are mapped by the
 * C library's own calls, which nobody interposes: a thread that cannot start goes unexplained
 * unless a mapping of the program's was refused first. */
#define _GNU_SOURCE
#include "as_limit.h"

#include "export.h"
#include "log.h"
#include "vspace.h"

#include <errno.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The soft limit last set below what the process maps because of our reservations, or 0. */
static uint64_t tight_limit;

static void note(pid_t pid, int resource, rlim_t soft) {
  if (resource != RLIMIT_AS || (pid != 0 && pid != getpid())) return;
  const uint64_t reserved = nic_vspace_held();
  const uint64_t mapped = soft == RLIM_INFINITY ? 0 : nic_vspace_mapped();
  const bool ours = reserved && soft < mapped && soft + reserved >= mapped;
  __atomic_store_n(&tight_limit, ours ? (uint64_t)soft : 0, __ATOMIC_RELAXED);
}

void nic_as_limit_mapping_refused(void) {
  const int saved = errno;
  const uint64_t soft = __atomic_load_n(&tight_limit, __ATOMIC_RELAXED);
  if (saved == ENOMEM && soft)
    nic_log_warn_once(
        "a mapping was refused: RLIMIT_AS was lowered to %llu MiB while the process ran, "
        "and %llu MiB of address space nicmalloc reserved at start-up, with tables "
        "for it, never committed, count against it; nothing more can be mapped (new "
        "threads fail too; malloc goes on). Set the limit before the program starts "
        "(ulimit -v, or prlimit before exec): nicmalloc then reserves only what it "
        "leaves",
        (unsigned long long)(soft >> 20), (unsigned long long)(nic_vspace_held() >> 20));
  errno = saved;
}

/* glibc's own setrlimit is the prlimit64 system call on this process; so is ours. */
static int set_limit(pid_t pid, int resource, const void *limit, void *old) {
  return (int)syscall(SYS_prlimit64, pid, resource, limit, old);
}

NIC_EXPORT int prlimit(pid_t pid, __rlimit_resource_t resource, const struct rlimit *limit,
                       struct rlimit *old) {
  const int rc = set_limit(pid, resource, limit, old);
  if (rc == 0 && limit) note(pid, resource, limit->rlim_cur);
  return rc;
}

NIC_EXPORT int prlimit64(pid_t pid, __rlimit_resource_t resource, const struct rlimit64 *limit,
                         struct rlimit64 *old) {
  const int rc = set_limit(pid, resource, limit, old);
  if (rc == 0 && limit) note(pid, resource, limit->rlim_cur);
  return rc;
}

/* setrlimit is prlimit on this process, as in glibc. */
NIC_EXPORT int setrlimit(__rlimit_resource_t resource, const struct rlimit *limit) {
  return prlimit(0, resource, limit, NULL);
}

NIC_EXPORT int setrlimit64(__rlimit_resource_t resource, const struct rlimit64 *limit) {
  return prlimit64(0, resource, limit, NULL);
}
