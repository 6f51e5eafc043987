# bench_suite_quick: bench/suite.sh quick into a fresh directory; passes when suite.md has its
# sections, a row for every bench/suite program under every allocator (or the allocator is
# listed as not installed) with all its runs ok, no value MISSING, no NaN, and suite.log has each
# program's result line naming the library the allocator's malloc must come from (suite.sh marks
# a run FAILED otherwise too: a preload that did not take effect cannot pass). No timing is
# judged (shared, noisy machines). Included from bench/suite/CMakeLists.txt, where the programs
# are defined, to register the test; run by cmake -P as the test itself.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME bench_suite_quick
    COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -DBUILD=${PROJECT_BINARY_DIR}
            -DOUT=${PROJECT_BINARY_DIR}/tests/bench_suite_quick -P ${CMAKE_CURRENT_LIST_FILE})
  # Serial: it measures. Under 60 s of CPU; the timeout allows for a loaded machine.
  set_tests_properties(bench_suite_quick PROPERTIES LABELS bench TIMEOUT 900 RUN_SERIAL TRUE)
  return()
endif()

file(REMOVE_RECURSE ${OUT})
set(ENV{NICMALLOC_BUILD_DIR} ${BUILD})
execute_process(COMMAND ${ROOT}/bench/suite.sh quick ${OUT} RESULT_VARIABLE rc)
set(report ${OUT}/suite.md)
if(NOT EXISTS ${report})
  message(FATAL_ERROR "bench_suite_quick: no ${report} (suite.sh status ${rc})")
endif()
file(READ ${report} text)
file(READ ${OUT}/suite.log log)
foreach(h "Time: " "Peak RSS: " "CPU time " "Targets (#20)" "Every program and allocator")
  string(FIND "${text}" "## ${h}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "bench_suite_quick: section '${h}' missing from ${report}")
  endif()
endforeach()
# The programs are the sources, so one that was not built (or not found by suite.sh) fails here.
file(GLOB sources ${ROOT}/bench/suite/*.c)
if(NOT sources)
  message(FATAL_ERROR "bench_suite_quick: no programs in ${ROOT}/bench/suite")
endif()
# allocator=file name its malloc must come from (as bench/preload.sh)
set(allocators glibc=libc.so mimalloc=libmimalloc jemalloc=libjemalloc tcmalloc=libtcmalloc
               nicmalloc=libnicmalloc nicmalloc-dp4k=libnicmalloc)
string(REGEX MATCH "- skipped: [^\n]*" skipped "${text}")
foreach(source ${sources})
  get_filename_component(p ${source} NAME_WE)
  foreach(entry ${allocators})
    string(REPLACE "=" ";" pair ${entry})
    list(GET pair 0 a)
    list(GET pair 1 lib)
    if(skipped MATCHES " ${a}[ ,]")
      continue()
    endif()
    string(REGEX MATCH "\\| ${p} \\| ${a} \\| [0-9]+ ok \\|" row "${text}")
    if(NOT row)
      message(FATAL_ERROR "bench_suite_quick: no ok row for ${p} under ${a} in ${report}")
    endif()
    string(REGEX MATCH "\n${p}/${a} rep 1: [^\n]* ok: [^\n]*malloc from [^\n]*${lib}" line "\n${log}")
    if(NOT line)
      message(FATAL_ERROR "bench_suite_quick: ${p} under ${a}: no result line naming ${lib} in "
                          "${OUT}/suite.log")
    endif()
  endforeach()
endforeach()
foreach(bad "FAILED" "MISSING")
  string(FIND "${text}" "${bad}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "bench_suite_quick: '${bad}' in ${report} (suite.sh status ${rc})")
  endif()
endforeach()
string(REGEX MATCH "[^A-Za-z_](nan|NaN|inf|-inf)[^A-Za-z_]" bad "${text}")
if(bad)
  message(FATAL_ERROR "bench_suite_quick: '${bad}' in ${report}")
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench_suite_quick: suite.sh status ${rc}; see ${OUT}/suite.log")
endif()
message(STATUS "bench_suite_quick: ${report} complete")
