/* cache-scratch with one thread (the suites' cache-scratch1): the same program, so that the
 * allocator's cost without any sharing is the baseline next to the N-thread run. */
#define CACHE_SCRATCH_THREADS 1
#define CACHE_SCRATCH_NAME "cache-scratch1"
#include "cache-scratch.c"
