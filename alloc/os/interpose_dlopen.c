/* dlopen (and dlmopen into the base namespace) without RTLD_DEEPBIND. A library loaded with it
 * looks up its symbols in its own dependencies first, libc among them, so its malloc and free are
 * glibc's, not ours, whether nicmalloc is preloaded or linked: a block it allocates and the program
 * frees is not ours (reported, and leaked), and a block of ours it frees makes glibc abort the
 * program ("double free or corruption"). PHP loads its extensions that way. glibc 2.34 removed the
 * hooks other allocators used to reach such libraries, so the flag is taken off: the library then
 * resolves its symbols as without it, the way it does under the sanitizers, which refuse the flag.
 *
 * glibc's dlopen takes the caller's return address to find the calling object, whose RUNPATH
 * and $ORIGIN name where a library is searched for. So the interposed dlopen must leave no frame
 * of its own: on x86-64 it is a few instructions that jump to the real one with the caller's
 * return address in place; elsewhere a C tail call, which the compiler makes a jump when
 * optimising. */
#define _GNU_SOURCE
#include "interpose_dlopen.h"

#include "export.h"
#include "log.h"

#include <dlfcn.h>
#include <stdbool.h>

_Static_assert(RTLD_DEEPBIND == 8, "the x86-64 entry below tests bit 3 of the mode");

/* The C library's definition of name, kept in *slot once found (NULL when there is none below
 * us: nothing can be loaded). */
static void *next_symbol(void **slot, const char *name) {
  void *real = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (!real) {
    real = dlsym(RTLD_NEXT, name);
    __atomic_store_n(slot, real, __ATOMIC_RELEASE);
  }
  return real;
}

unsigned long nic_dlopen_calls;

/* glibc's dlopen, found on the first call (a constructor of another library may be first). */
__attribute__((visibility("hidden"))) void *(*nic_real_dlopen)(const char *, int);

/* The way past the jump: a first call, or the flag to take off. Returns glibc's dlopen, or NULL
 * when there is no C library below us. */
__attribute__((visibility("hidden"), used)) void *nic_dlopen_slow(const char *file, int mode) {
  if (mode & RTLD_DEEPBIND)
    nic_log_fallback_once(false,
                          "dlopen(\"%s\", RTLD_DEEPBIND): loaded without RTLD_DEEPBIND, so that "
                          "its malloc and free are nicmalloc's too (with it they would be "
                          "glibc's, and a block passed across would abort the program); so are "
                          "later ones",
                          file ? file : "(null)");
  return next_symbol((void **)&nic_real_dlopen, "dlopen");
}

/* glibc's dlmopen, likewise. Only a load into the base namespace (LM_ID_BASE) is changed: a new
 * namespace has a libc, and a malloc, of its own by design. */
__attribute__((visibility("hidden"))) void *(*nic_real_dlmopen)(Lmid_t, const char *, int);

__attribute__((visibility("hidden"), used)) void *nic_dlmopen_slow(Lmid_t lmid, const char *file,
                                                                   int mode) {
  if (lmid == LM_ID_BASE && (mode & RTLD_DEEPBIND))
    nic_log_fallback_once(false,
                          "dlmopen(LM_ID_BASE, \"%s\", RTLD_DEEPBIND): loaded without "
                          "RTLD_DEEPBIND, as dlopen does; so are later ones",
                          file ? file : "(null)");
  return next_symbol((void **)&nic_real_dlmopen, "dlmopen");
}

_Static_assert(LM_ID_BASE == 0, "the x86-64 entry below tests the namespace against 0");

#if defined(__x86_64__)
/* On entry: the arguments in rdi, rsi and edx (dlopen: file and mode; dlmopen: namespace, file
 * and mode), the caller's return address at (rsp). The call is counted first (the flags the
 * increment sets are set again by the tests after it). to_slow jumps to 1 when the flag must go;
 * take_off clears it in the saved mode. The slow path saves the three argument registers (three
 * pushes keep the call 16-byte aligned) and jumps to what nic_<name>_slow returns. */
#define FRAMELESS_ENTRY(name, to_slow, take_off)                                                   \
  __asm__(".text\n"                                                                                \
          ".globl " #name "\n"                                                                     \
          ".type " #name ", @function\n" #name ":\n"                                               \
          "  .cfi_startproc\n"                                                                     \
          "  lock incq nic_dlopen_calls(%rip)\n" to_slow "  movq nic_real_" #name "(%rip), %rax\n" \
          "  testq %rax, %rax\n"                                                                   \
          "  jz 1f\n"                                                                              \
          "  jmp *%rax\n"                                                                          \
          "1:\n"                                                                                   \
          "  pushq %rdi\n"                                                                         \
          "  .cfi_adjust_cfa_offset 8\n"                                                           \
          "  pushq %rsi\n"                                                                         \
          "  .cfi_adjust_cfa_offset 8\n"                                                           \
          "  pushq %rdx\n"                                                                         \
          "  .cfi_adjust_cfa_offset 8\n"                                                           \
          "  call nic_" #name "_slow\n"                                                            \
          "  popq %rdx\n"                                                                          \
          "  .cfi_adjust_cfa_offset -8\n"                                                          \
          "  popq %rsi\n"                                                                          \
          "  .cfi_adjust_cfa_offset -8\n"                                                          \
          "  popq %rdi\n"                                                                          \
          "  .cfi_adjust_cfa_offset -8\n" take_off "  testq %rax, %rax\n"                          \
          "  jz 2f\n"                                                                              \
          "  jmp *%rax\n"                                                                          \
          "2:\n"                                                                                   \
          "  xorl %eax, %eax\n" /* no C library below us: nothing can be loaded */                 \
          "  ret\n"                                                                                \
          "  .cfi_endproc\n"                                                                       \
          ".size " #name ", .-" #name "\n")

FRAMELESS_ENTRY(dlopen, "  testl $8, %esi\n  jnz 1f\n", "  andl $-9, %esi\n");
/* Only the base namespace, number 0. */
FRAMELESS_ENTRY(dlmopen, "  testq %rdi, %rdi\n  jnz 3f\n  testl $8, %edx\n  jnz 1f\n3:\n",
                "  testq %rdi, %rdi\n  jnz 4f\n  andl $-9, %edx\n4:\n");
#else
NIC_EXPORT void *dlopen(const char *file, int mode) {
  __atomic_add_fetch(&nic_dlopen_calls, 1, __ATOMIC_RELAXED);
  void *(*real)(const char *, int) = __atomic_load_n(&nic_real_dlopen, __ATOMIC_ACQUIRE);
  if (!real || (mode & RTLD_DEEPBIND))
    real = (void *(*)(const char *, int))nic_dlopen_slow(file, mode);
  if (!real) return NULL;
  return real(file, mode & ~RTLD_DEEPBIND);
}

NIC_EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode) {
  __atomic_add_fetch(&nic_dlopen_calls, 1, __ATOMIC_RELAXED);
  void *(*real)(Lmid_t, const char *, int) = __atomic_load_n(&nic_real_dlmopen, __ATOMIC_ACQUIRE);
  const bool base = lmid == LM_ID_BASE;
  if (!real || (base && (mode & RTLD_DEEPBIND)))
    real = (void *(*)(Lmid_t, const char *, int))nic_dlmopen_slow(lmid, file, mode);
  if (!real) return NULL;
  return real(lmid, file, base ? mode & ~RTLD_DEEPBIND : mode);
}
#endif
