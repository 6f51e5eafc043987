// A library compiled as the LLVM pass compiles code: its allocations call the site ABI, its
// frees and deletes stay the program's own. Loaded with dlopen (dlopen_host.c) by a program whose
// malloc is glibc's, those frees reach glibc's free, which aborts on a block of nicmalloc's: the
// sites must then allocate from the program's malloc family. Preloaded, nicmalloc is the malloc
// and the sites' blocks are dataplane memory. Prints key=value lines.
#include "nicmalloc.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {

constexpr uint32_t kSite = 0; // every site starts on

int dataplane_blocks = 0, blocks = 0;

void note(const void *p) {
  blocks++;
  dataplane_blocks += nic_is_dataplane(p) == 1;
}

} // namespace

extern "C" int dlopen_ext_run(void) {
  char *m = static_cast<char *>(nic_malloc_site(3000, kSite));
  char *c = static_cast<char *>(nic_calloc_site(10, 300, kSite));
  char *a = static_cast<char *>(nic_aligned_alloc_site(4096, 5000, kSite));
  void *pm = nullptr;
  const int pm_rc = nic_posix_memalign_site(&pm, 64, 700, kSite);
  if (!m || !c || !a || pm_rc || !pm) return 1;
  note(m), note(c), note(a), note(pm);
  int zeroed = 1;
  for (int i = 0; i < 3000; i++)
    zeroed &= c[i] == 0;
  memset(m, 7, 3000);
  char *r = static_cast<char *>(nic_realloc_site(m, 90000, kSite));
  if (!r) return 1;
  note(r);
  int kept = 1;
  for (int i = 0; i < 3000; i++)
    kept &= r[i] == 7;
  printf("calloc_zeroed=%d\nrealloc_kept=%d\naligned=%d\n", zeroed, kept,
         (uintptr_t)a % 4096 == 0 && (uintptr_t)pm % 64 == 0);
  free(r); // the program's free, as the pass leaves it
  free(c);
  free(a);
  free(pm);
  int *n = static_cast<int *>(nic_new_site(sizeof(int) * 100, kSite));
  auto *na = static_cast<double *>(nic_new_aligned_site(sizeof(double) * 64, 256, kSite));
  void *nt = nic_new_nothrow_site(500, &std::nothrow, kSite);
  void *nat = nic_new_aligned_nothrow_site(500, 128, &std::nothrow, kSite);
  if (!nt || !nat) return 1;
  note(n), note(na), note(nt), note(nat);
  operator delete(n);
  operator delete(na, std::align_val_t(256));
  operator delete(nt);
  operator delete(nat, std::align_val_t(128));
  void *arr = nic_new_array_site(900, kSite);
  void *arr_a = nic_new_array_aligned_site(900, 256, kSite);
  void *arr_nt = nic_new_array_nothrow_site(900, &std::nothrow, kSite);
  void *arr_nat = nic_new_array_aligned_nothrow_site(900, 128, &std::nothrow, kSite);
  if (!arr_nt || !arr_nat) return 1;
  note(arr), note(arr_a), note(arr_nt), note(arr_nat);
  operator delete[](arr);
  operator delete[](arr_a, std::align_val_t(256));
  operator delete[](arr_nt);
  operator delete[](arr_nat, std::align_val_t(128));
  printf("blocks=%d\ndataplane_blocks=%d\nfreed=1\n", blocks, dataplane_blocks);
  fflush(stdout);
  return 0;
}
