// For e2e-replaced-new.cpp: the program's own operator new(size_t) and operator delete(void *),
// in a file of their own, with a header the delete checks: a block they did not make ends the
// program. The aligned operators are left to the C++ runtime (nicmalloc's).
#include <cstdio>
#include <cstdlib>
#include <new>

namespace {
constexpr std::size_t kHeader = 16;
constexpr std::size_t kMark = 0xC0FFEE;
long news, deletes;
} // namespace

void *operator new(std::size_t n) {
  char *block = static_cast<char *>(std::malloc(n + kHeader));
  if (!block) throw std::bad_alloc();
  *reinterpret_cast<std::size_t *>(block) = kMark;
  news++;
  return block + kHeader;
}

void operator delete(void *p) noexcept {
  if (!p) return;
  char *block = static_cast<char *>(p) - kHeader;
  if (*reinterpret_cast<std::size_t *>(block) != kMark) {
    std::fprintf(stderr, "operator delete: %p was not made by the program's operator new\n", p);
    std::abort();
  }
  *reinterpret_cast<std::size_t *>(block) = 0;
  deletes++;
  std::free(block);
}

extern "C" void replaced_operator_calls(long *new_calls, long *delete_calls) {
  *new_calls = news;
  *delete_calls = deletes;
}
