// The program's replacement of the basic operator new and delete, unaligned and aligned, and of
// nothing else (cxx_replaced_program.cc uses them): each block carries a header the delete
// checks, so a block it did not make, or one of its blocks freed elsewhere, ends the program.
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {

constexpr size_t kHeader = 64; // keeps every alignment the program asks for up to 64
constexpr unsigned long kMark = 0xC0FFEE;

long counts[4]; // unaligned news, deletes, aligned news, deletes

void *make(size_t n, size_t alignment) {
  if (alignment > kHeader) std::abort();
  char *block = static_cast<char *>(std::aligned_alloc(kHeader, kHeader + n));
  if (!block) throw std::bad_alloc();
  *reinterpret_cast<unsigned long *>(block) = kMark;
  return block + kHeader;
}

void take(void *p, const char *what) {
  if (!p) return;
  char *block = static_cast<char *>(p) - kHeader;
  if (*reinterpret_cast<unsigned long *>(block) != kMark) {
    std::fprintf(stderr, "%s: %p was not made by the program's operator new\n", what, p);
    std::abort();
  }
  *reinterpret_cast<unsigned long *>(block) = 0;
  std::free(block);
}

} // namespace

void *operator new(std::size_t n) {
  counts[0]++;
  return make(n, 0);
}
void operator delete(void *p) noexcept {
  counts[1] += p != nullptr;
  take(p, "operator delete");
}
void *operator new(std::size_t n, std::align_val_t al) {
  counts[2]++;
  return make(n, static_cast<size_t>(al));
}
void operator delete(void *p, std::align_val_t) noexcept {
  counts[3] += p != nullptr;
  take(p, "operator delete(align_val_t)");
}

extern "C" void replaced_operator_counts(long out[4]) {
  for (int i = 0; i < 4; i++)
    out[i] = counts[i];
}
