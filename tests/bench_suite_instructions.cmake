# bench_suite_instructions_quick: bench/suite_instructions.sh on one small program (glibc-simple,
# which starts a second thread, so it runs twice) under mimalloc and nicmalloc at scale 1, into a
# fresh directory; passes when the script exits 0, instructions.csv has exactly the two runs of
# each allocator, all ok with a count of at least a million instructions (the program's own work
# is far more), and instructions.md has the program's row with a ratio for nicmalloc. Without
# valgrind the script says so and exits non-zero, and this test fails with its message
# (scripts/install-deps.sh installs valgrind). No count is judged against another. Included from
# bench/suite/CMakeLists.txt, where the programs are defined, to register the test; run by
# cmake -P as the test itself.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME bench_suite_instructions_quick
    COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -DBUILD=${PROJECT_BINARY_DIR}
            -DOUT=${PROJECT_BINARY_DIR}/tests/bench_suite_instructions_quick
            -P ${CMAKE_CURRENT_LIST_FILE})
  # About 15 s of CPU (four runs under valgrind); the timeout allows for a loaded machine.
  set_tests_properties(bench_suite_instructions_quick PROPERTIES LABELS bench TIMEOUT 600)
  return()
endif()

set(program glibc-simple)
set(allocators mimalloc nicmalloc)
file(REMOVE_RECURSE ${OUT})
set(ENV{NICMALLOC_BUILD_DIR} ${BUILD})
set(ENV{SUITE_ONLY} ${program})
string(REPLACE ";" " " alloc_list "${allocators}")
set(ENV{INSTR_ALLOCS} "${alloc_list}")
set(ENV{INSTR_REPS_MT} 2)
execute_process(COMMAND ${ROOT}/bench/suite_instructions.sh 1 ${OUT} RESULT_VARIABLE rc
                ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench_suite_instructions_quick: suite_instructions.sh status ${rc}: ${err}")
endif()
file(STRINGS ${OUT}/instructions.csv rows)
list(LENGTH rows n)
if(NOT n EQUAL 5)
  message(FATAL_ERROR "bench_suite_instructions_quick: ${n} lines in instructions.csv, expected "
                      "a header and 2 runs under each of ${alloc_list}: ${rows}")
endif()
file(READ ${OUT}/instructions.csv csv)
file(READ ${OUT}/instructions.md report)
foreach(a ${allocators})
  foreach(rep 1 2)
    # rep,program,allocator,threads,instructions,status
    set(line "${rep},${program},${a},multi,[1-9][0-9][0-9][0-9][0-9][0-9][0-9]+,ok")
    string(REGEX MATCH "\n${line}\n" row "\n${csv}")
    if(NOT row)
      message(FATAL_ERROR "bench_suite_instructions_quick: no ok run ${rep} of ${program} under "
                          "${a} with a count of a million or more in ${OUT}/instructions.csv:\n"
                          "${csv}")
    endif()
  endforeach()
endforeach()
string(REGEX MATCH "\n\\| ${program} \\| 2\\+ threads \\| [0-9.]+ \\| [0-9.]+ \\([0-9.]+\\) \\|" row
       "${report}")
if(NOT row)
  message(FATAL_ERROR "bench_suite_instructions_quick: no row for ${program} with nicmalloc's "
                      "ratio to mimalloc in ${OUT}/instructions.md:\n${report}")
endif()
foreach(bad "FAILED" "MISSING")
  string(FIND "${report}" "${bad}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "bench_suite_instructions_quick: '${bad}' in ${OUT}/instructions.md")
  endif()
endforeach()
message(STATUS "bench_suite_instructions_quick: ${OUT}/instructions.md complete")
