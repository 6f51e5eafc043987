/* cxx_new_c_program COMMAND: the cases of cxx_new_cases.cc in a C program, whose C++ runtime comes
 * with the library that holds them: preloaded, libnicmalloc's own libraries (libmimalloc, which
 * defines the operators too) then come before libstdc++ in the lookup order. */
#include <stddef.h>

int cxx_new_cases_run(const char *command);

int main(int argc, char **argv) {
  return cxx_new_cases_run(argc > 1 ? argv[1] : NULL);
}
