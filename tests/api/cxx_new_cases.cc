// C++ operator new's failures, as a program sees them: the cases of cxx_new_program (C++) and
// cxx_new_c_program (C, whose C++ comes with this library), neither linked with nicmalloc: run them
// with LD_PRELOAD (and without, for the C++ runtime's own answers). Each prints key=value lines
// for test_cxx_new.
//   nothrow-handler: each nothrow form, with a new-handler that uninstalls itself (how many
//                    times it ran, whether the result was null)
//   throwing-handler: the same with a handler that throws std::bad_alloc, which a nothrow form
//                     must turn into a null result
//   bad-alignment: alignments that are not powers of two, throwing and nothrow forms, with a
//                  handler installed (that throws)
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

// Whether operator new(100, align) (or new[] when array) threw bad_alloc; a block it returned
// instead is freed. *calls is how many times the handler ran.
bool aligned_new_throws(size_t align, bool array, int *calls) {
  new_handler_calls = 0;
  std::set_new_handler(new_handler_throwing);
  bool threw = false;
  try {
    void *p = array ? ::operator new[](100, std::align_val_t(align))
                    : ::operator new(100, std::align_val_t(align));
    ::operator delete(p, std::align_val_t(align));
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  std::set_new_handler(nullptr);
  *calls = new_handler_calls;
  return threw;
}

int bad_alignment() {
  for (size_t align : {size_t(3), size_t(48), size_t(24) << 20}) {
    int calls = 0, array_calls = 0;
    const bool threw = aligned_new_throws(align, false, &calls);
    const bool array_threw = aligned_new_throws(align, true, &array_calls);
    new_handler_calls = 0;
    std::set_new_handler(new_handler_throwing);
    void *p = ::operator new(100, std::align_val_t(align), std::nothrow);
    void *q = ::operator new[](100, std::align_val_t(align), std::nothrow);
    std::set_new_handler(nullptr);
    std::printf("align_%zu_threw=%d\nalign_%zu_array_threw=%d\nalign_%zu_nothrow_null=%d\n"
                "align_%zu_array_nothrow_null=%d\nalign_%zu_handler_calls=%d\n",
                align, threw, align, array_threw, align, p == nullptr, align, q == nullptr, align,
                calls + array_calls + new_handler_calls);
    if (p) ::operator delete(p, std::align_val_t(align));
    if (q) ::operator delete[](q, std::align_val_t(align));
  }
  return 0;
}

} // namespace

extern "C" __attribute__((visibility("default"))) int cxx_new_cases_run(const char *name) {
  const std::string command = name ? name : "";
  if (command == "nothrow-handler") return nothrow_with(new_handler_giving_up);
  if (command == "throwing-handler") return nothrow_with(new_handler_throwing);
  if (command == "bad-alignment") return bad_alignment();
  std::fprintf(stderr, "usage: PROGRAM nothrow-handler | throwing-handler | bad-alignment\n");
  return 2;
}
