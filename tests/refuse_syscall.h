/* A probe's own seccomp filter: one system call fails with err, as under a container's seccomp
 * profile or on a kernel without it. Raw BPF: libseccomp is not a dependency. */
#ifndef NIC_TESTS_REFUSE_SYSCALL_H
#define NIC_TESTS_REFUSE_SYSCALL_H

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>

/* System call nr fails with err from now on, in this process and what it execs; with arg2 >= 0
 * only when its third argument is arg2 (madvise's advice, say). 0, or -1 when the kernel
 * refused the filter. */
static inline int nic_refuse_syscall(int nr, int arg2, int err) {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)arg2, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)err),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  if (arg2 < 0) filter[3] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, 0, 0, 0);
  struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
    return -1;
  return 0;
}

#endif
