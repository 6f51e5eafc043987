# bench_ctl_misses_smoke: bench/ctl_misses.sh on a small Larson run (one repetition) into a fresh
# directory; passes when ctl_misses.md has a numeric row per allocator and charges the free
# path's line in alloc/core/alloc_inline.h with D1 read misses (the report's attribution by
# source line works, and the library it found is nicmalloc's). No figure is judged. Skipped
# without valgrind. Included from bench/workloads/CMakeLists.txt, where wl_ctl_threads is defined;
# run by cmake -P as the test itself.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  find_program(NIC_VALGRIND valgrind)
  if(NOT NIC_VALGRIND)
    return()
  endif()
  add_test(NAME bench_ctl_misses_smoke
    COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -DBUILD=${PROJECT_BINARY_DIR}
            -DOUT=${PROJECT_BINARY_DIR}/tests/bench_ctl_misses_smoke -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(bench_ctl_misses_smoke PROPERTIES LABELS bench TIMEOUT 300)
  return()
endif()

file(REMOVE_RECURSE ${OUT})
set(ENV{NICMALLOC_BUILD_DIR} ${BUILD})
set(ENV{CTL_MISS_RUN} "larson 1 1 2000")
execute_process(COMMAND ${ROOT}/bench/ctl_misses.sh ${OUT} 1 RESULT_VARIABLE rc)
set(report ${OUT}/ctl_misses.md)
if(NOT rc EQUAL 0 OR NOT EXISTS ${report})
  message(FATAL_ERROR "bench_ctl_misses_smoke: ctl_misses.sh status ${rc}, report ${report}")
endif()
file(READ ${report} text)
foreach(a mimalloc nicmalloc)
  string(REGEX MATCH "\n\\| ${a} \\| [0-9,]+ \\[[0-9,]+-[0-9,]+\\] \\| [0-9,]+ " row "${text}")
  if(NOT row)
    message(FATAL_ERROR "bench_ctl_misses_smoke: no numeric row for ${a} in ${report}")
  endif()
endforeach()
# The free's line: its D1 read misses (column 2 of the events) are not zero.
string(REGEX MATCH "\n\\| alloc/core/alloc_inline\\.h:[0-9]+ \\| [^\n]* \\| [0-9,]+ \\| [1-9][0-9,]* \\|"
       line "${text}")
if(NOT line)
  message(FATAL_ERROR "bench_ctl_misses_smoke: no line of alloc/core/alloc_inline.h with D1 read "
                      "misses in ${report}")
endif()
message(STATUS "bench_ctl_misses_smoke: ${report} complete")
