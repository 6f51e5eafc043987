/* sh8bench: modeled on the published description of MicroQuill's SmartHeap benchmark sh8bench,
 * sh6bench's pattern with cross-thread frees: each round a thread hands half of its blocks to the
 * next thread (in a ring), which frees them. Written for this repository, not the original. */
#define SH_NAME "sh8bench"
#define SH_CROSS 1
#include "sh6bench.c"
