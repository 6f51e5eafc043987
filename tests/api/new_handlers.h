// New-handlers that count their calls, for the tests of operator new's failures.
#pragma once

#include <new>

inline int new_handler_calls;

// Gives up: the next failure is the operator's own.
inline void new_handler_giving_up() {
  new_handler_calls++;
  std::set_new_handler(nullptr);
}

inline void new_handler_throwing() {
  new_handler_calls++;
  throw std::bad_alloc();
}
