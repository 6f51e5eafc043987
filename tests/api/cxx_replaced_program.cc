// cxx_replaced_program: a program that replaces only the basic operator new and delete of each
// family (cxx_replaced_operators.cc) and uses every other form, which the standard defines by
// those: new[] and the nothrow news call new, the sized, nothrow and array deletes call delete.
// Built with sized deallocation, as g++ builds C++14 and later. Prints key=value lines: how many
// of each form it called, how many calls the replacement saw, and how many nothrow forms of each
// kind returned null for a request the replacement cannot serve. Built with CXX_REPLACED_SITES
// (linked with nicmalloc), it also calls each of the LLVM pass's new sites.
#include <cstdio>
#include <new>

#ifdef CXX_REPLACED_SITES
#include "nicmalloc.h"
#endif

extern "C" void replaced_operator_counts(long out[4]);

namespace {

struct Msg {
  char bytes[200];
};
struct Node { // a destructor: new[] keeps a count, and delete[] is sized
  ~Node() { bytes[0] = 0; }
  char bytes[24];
};
struct alignas(64) Line {
  char bytes[64];
};
struct alignas(64) LineNode {
  ~LineNode() { bytes[0] = 0; }
  char bytes[64];
};

// Keeps the compiler from taking a new-expression and its delete away.
template <typename T> T *kept(T *p) {
  __asm__ volatile("" : "+r"(p)::"memory");
  return p;
}

long calls[4];

// Before main too, where the first of these forms may be the process's first call of them.
struct BeforeMain {
  BeforeMain() {
    delete[] kept(new Node[2]);
    calls[0]++, calls[1]++;
  }
} before_main;

} // namespace

int main() {
  delete kept(new Msg);                       // new, sized delete
  delete[] kept(new char[100]);               // new[], delete[]
  delete[] kept(new Node[3]);                 // new[], sized delete[]
  delete kept(new (std::nothrow) Msg);        // nothrow new
  delete[] kept(new (std::nothrow) char[50]); // nothrow new[]
  operator delete(kept(operator new(10)), std::nothrow);
  operator delete[](kept(operator new[](10)), std::nothrow);
  calls[0] += 7, calls[1] += 7;
  delete kept(new Line);                     // aligned new, sized aligned delete
  delete[] kept(new Line[2]);                // aligned new[], aligned delete[]
  delete[] kept(new LineNode[2]);            // aligned new[], sized aligned delete[]
  delete kept(new (std::nothrow) Line);      // aligned nothrow new
  delete[] kept(new (std::nothrow) Line[3]); // aligned nothrow new[]
  operator delete(kept(operator new(10, std::align_val_t(64))), std::align_val_t(64), std::nothrow);
  operator delete[](kept(operator new[](10, std::align_val_t(64))), std::align_val_t(64),
                    std::nothrow);
  calls[2] += 7, calls[3] += 7;
#ifdef CXX_REPLACED_SITES
  // The LLVM pass's sites for these new-expressions allocate through the program's operators,
  // whose deletes take what they make.
  const uint32_t site = 5;
  delete static_cast<Msg *>(kept(nic_new_site(sizeof(Msg), site)));
  delete[] static_cast<char *>(kept(nic_new_array_site(100, site)));
  delete static_cast<Msg *>(kept(nic_new_nothrow_site(sizeof(Msg), &std::nothrow, site)));
  delete[] static_cast<char *>(kept(nic_new_array_nothrow_site(50, &std::nothrow, site)));
  calls[0] += 4, calls[1] += 4;
  delete static_cast<Line *>(kept(nic_new_aligned_site(sizeof(Line), 64, site)));
  delete[] static_cast<Line *>(kept(nic_new_array_aligned_site(2 * sizeof(Line), 64, site)));
  delete static_cast<Line *>(
      kept(nic_new_aligned_nothrow_site(sizeof(Line), 64, &std::nothrow, site)));
  delete[] static_cast<Line *>(
      kept(nic_new_array_aligned_nothrow_site(3 * sizeof(Line), 64, &std::nothrow, site)));
  calls[2] += 4, calls[3] += 4;
#endif
  long seen[4];
  replaced_operator_counts(seen);
  const char *names[] = {"new", "delete", "aligned_new", "aligned_delete"};
  for (int i = 0; i < 4; i++)
    std::printf("%s_calls=%ld\n%s_seen=%ld\n", names[i], calls[i], names[i], seen[i]);
  // What the program's new throws, a nothrow form turns into a null result.
  const size_t impossible = size_t(1) << 46; // 64 TiB: past any machine's memory and overcommit
  const auto al = std::align_val_t(64);
  const int nulls = !kept(operator new(impossible, std::nothrow)) +
                    !kept(operator new[](impossible, std::nothrow)) +
                    !kept(operator new(impossible, al, std::nothrow)) +
                    !kept(operator new[](impossible, al, std::nothrow));
  std::printf("impossible_nothrow_nulls=%d\n", nulls);
  return 0;
}
