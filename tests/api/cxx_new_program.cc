// cxx_new_program COMMAND: the cases of cxx_new_cases.cc in a C++ program, built into it.
extern "C" int cxx_new_cases_run(const char *command);

int main(int argc, char **argv) {
  return cxx_new_cases_run(argc > 1 ? argv[1] : nullptr);
}
