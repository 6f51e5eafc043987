/* See own_stack.h. pthread_getattr_np gives the exact stack block of a thread (the mapping that
 * holds the stack pointer may have been merged by the kernel with a neighbour the program can
 * unmap later, so /proc/self/maps alone would not do). */
#define _GNU_SOURCE
#include "own_stack.h"

#include <pthread.h>

enum { STACK_UNKNOWN, STACK_KNOWN, STACK_UNAVAILABLE };

static __thread struct {
  uintptr_t bottom, top;
  int state;
} own_stack __attribute__((tls_model("initial-exec")));

void nic_own_stack_learn(void) {
  if (__builtin_expect(own_stack.state != STACK_UNKNOWN, 1)) return;
  pthread_attr_t attr;
  void *addr;
  size_t size;
  own_stack.state = STACK_UNAVAILABLE;
  if (pthread_getattr_np(pthread_self(), &attr)) return;
  if (!pthread_attr_getstack(&attr, &addr, &size) && addr && size) {
    own_stack.bottom = (uintptr_t)addr;
    own_stack.top = (uintptr_t)addr + size;
    own_stack.state = STACK_KNOWN;
  }
  pthread_attr_destroy(&attr);
}

bool nic_on_own_stack(uintptr_t start, uintptr_t last) {
  /* Not inlined: this frame lies below the caller's, so the frame address bounds every live
   * frame of the caller's stack. */
  const uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  if (own_stack.state != STACK_KNOWN) return false;
  /* Running on another stack (sigaltstack, makecontext): what lies between it and this thread's
   * stack is unknown. */
  if (sp < own_stack.bottom || sp >= own_stack.top) return false;
  return start >= sp && start <= last && last < own_stack.top;
}

bool nic_own_stack_overlaps(uintptr_t start, uintptr_t end, uintptr_t *lo, uintptr_t *hi) {
  if (own_stack.state != STACK_KNOWN || start >= own_stack.top || end <= own_stack.bottom)
    return false;
  *lo = own_stack.bottom;
  *hi = own_stack.top;
  return true;
}
