# bench_serialize_quick: bench/serialize/run.sh quick into a fresh directory (about 20 s); passes
# when report.md has every section and table filled: no row FAILED, no value MISSING (report.py
# writes that for a missing, zero or NaN figure), no NaN. No timing is judged (shared, noisy
# machines). Included from bench/serialize/CMakeLists.txt, where its programs are defined, to
# register the test; run by cmake -P as the test itself.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  add_test(NAME bench_serialize_quick
    COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -DBUILD=${PROJECT_BINARY_DIR}
            -DOUT=${PROJECT_BINARY_DIR}/tests/bench_serialize_quick -P ${CMAKE_CURRENT_LIST_FILE})
  # Serial: it measures, and it takes loopback ports and a DPDK EAL like other tests do.
  set_tests_properties(bench_serialize_quick PROPERTIES LABELS bench TIMEOUT 180 RUN_SERIAL TRUE)
  return()
endif()

file(REMOVE_RECURSE ${OUT})
set(ENV{NICMALLOC_BUILD_DIR} ${BUILD})
execute_process(COMMAND ${ROOT}/bench/serialize/run.sh quick ${OUT} RESULT_VARIABLE rc)
set(report ${OUT}/report.md)
if(NOT EXISTS ${report})
  message(FATAL_ERROR "bench_serialize_quick: no ${report} (run.sh status ${rc})")
endif()
file(READ ${report} text)
foreach(h "Machine and settings" "Steps" "Table 1: per-step cost"
          "Figure 3: copy-out vs zero-copy" "Figure 2: echo server" "SG entries vs latency")
  string(FIND "${text}" "## ${h}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "bench_serialize_quick: section '${h}' missing from ${report}")
  endif()
endforeach()
# Every table has its rows: the serializers of Table 1 (the SG path on both backends), the three
# transports of Figure 3, the four servers of Figure 2, both transports of the entry sweep.
foreach(row "| protobuf |" "| capnp |" "| flatbuffers |" "| sg (sim) |" "| sg (dpdk) |"
            "| sg-inline (dpdk) |" "| sim | 8192 |" "| uring | 64 |" "| dpdk | 1024 |"
            "| sg | 1024 | 16 |" "| protobuf | 1024 | 1 |" "| capnp | 1024 | 8 |"
            "| flatbuffers | 1024 | 2 |" "| sim | zero-copy | 32 |" "| dpdk | copy-out | 1 |")
  string(FIND "${text}" "${row}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "bench_serialize_quick: no row '${row}' in ${report}")
  endif()
endforeach()
foreach(bad "FAILED" "MISSING")
  string(FIND "${text}" "${bad}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "bench_serialize_quick: '${bad}' in ${report} (run.sh status ${rc})")
  endif()
endforeach()
string(REGEX MATCH "[^A-Za-z_](nan|NaN|inf|-inf)[^A-Za-z_]" bad "${text}")
if(bad)
  message(FATAL_ERROR "bench_serialize_quick: '${bad}' in ${report}")
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench_serialize_quick: run.sh status ${rc}; see ${OUT}/*.log")
endif()
message(STATUS "bench_serialize_quick: ${report} complete")
