# bench_programs_quick: bench/programs.sh quick into a fresh directory (git, sqlite3 and clang++-16
# under LD_PRELOAD, about a minute on 2 cores); passes when every run's output was the same as the
# run without nicmalloc and programs.md has every program's row filled: no FAILED, DIFFERENT or
# MISSING. No timing is judged (shared, noisy machines). Included from bench/CMakeLists.txt to
# register the test; run by cmake -P as the test itself.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME bench_programs_quick
    COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -DBUILD=${PROJECT_BINARY_DIR}
            -DOUT=${PROJECT_BINARY_DIR}/tests/bench_programs_quick -P ${CMAKE_CURRENT_LIST_FILE})
  # Serial: it measures.
  set_tests_properties(bench_programs_quick PROPERTIES LABELS bench TIMEOUT 300 RUN_SERIAL TRUE)
  return()
endif()

file(REMOVE_RECURSE ${OUT})
set(ENV{NICMALLOC_BUILD_DIR} ${BUILD})
execute_process(COMMAND ${ROOT}/bench/programs.sh quick ${OUT} RESULT_VARIABLE rc)
set(report ${OUT}/programs.md)
if(NOT EXISTS ${report})
  message(FATAL_ERROR "bench_programs_quick: no ${report} (programs.sh status ${rc})")
endif()
file(READ ${report} text)
foreach(program git sqlite clang)
  string(REGEX MATCH "\n\\| ${program} \\|[^\n]*\\| same \\|\n" row "${text}")
  if(NOT row)
    message(FATAL_ERROR "bench_programs_quick: no row '${program}' ending in 'same' in ${report}")
  endif()
endforeach()
foreach(bad "FAILED" "DIFFERENT" "MISSING")
  string(FIND "${text}" "${bad}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "bench_programs_quick: '${bad}' in ${report} (see ${OUT}/programs.log)")
  endif()
endforeach()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench_programs_quick: programs.sh status ${rc}; see ${OUT}/programs.log")
endif()
message(STATUS "bench_programs_quick: ${report} complete")
