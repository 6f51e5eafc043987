// cxx_new_program COMMAND: C++ operator new's failures, as a program sees them. Not linked with
// nicmalloc: run it with LD_PRELOAD (and without, for the C++ runtime's own answers). Prints
// key=value lines for test_cxx_new.
//   nothrow-handler: each nothrow form, with a new-handler that uninstalls itself (how many
//                    times it ran, whether the result was null)
//   throwing-handler: the same with a handler that throws std::bad_alloc, which a nothrow form
//                     must turn into a null result
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "new_handlers.h"

namespace {

const size_t impossible = size_t(1) << 46; // 64 TiB: past any machine's memory and overcommit

void *scalar_nothrow(size_t n) {
  return ::operator new(n, std::nothrow);
}
void *array_nothrow(size_t n) {
  return ::operator new[](n, std::nothrow);
}
void *aligned_nothrow(size_t n) {
  return ::operator new(n, std::align_val_t(64), std::nothrow);
}
void *aligned_array_nothrow(size_t n) {
  return ::operator new[](n, std::align_val_t(64), std::nothrow);
}

struct Form {
  const char *name;
  void *(*call)(size_t);
} const nothrow_forms[] = {{"scalar", scalar_nothrow},
                           {"array", array_nothrow},
                           {"aligned", aligned_nothrow},
                           {"aligned_array", aligned_array_nothrow}};

int nothrow_with(void (*handler)()) {
  for (const Form &form : nothrow_forms) {
    new_handler_calls = 0;
    std::set_new_handler(handler);
    void *p = form.call(impossible);
    std::set_new_handler(nullptr);
    std::printf("%s_calls=%d\n%s_null=%d\n", form.name, new_handler_calls, form.name, p == nullptr);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "nothrow-handler") return nothrow_with(new_handler_giving_up);
  if (command == "throwing-handler") return nothrow_with(new_handler_throwing);
  std::fprintf(stderr, "usage: cxx_new_program nothrow-handler | throwing-handler\n");
  return 2;
}
