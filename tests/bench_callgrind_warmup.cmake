# bench_callgrind_warmup: the callgrind loops of run_all.sh's callgrind and nic-paths steps
# (bench/hotpath_driver, bench/workloads/hotpath_translate) count the measured calls only. Each
# loop_<name> is run for 0 calls under callgrind with --toggle-collect=loop_<name>, as the steps
# run it: whatever it collects is the warm-up's, which the steps would divide by the measured
# calls. Passes when every loop collects fewer than 1000 instructions (a call and a return, and
# for nic_sga_add an array's init and reset: under 100); the first registration and cache fill of
# a warm-up are 60 thousand to 1.4 million. Skipped without valgrind. Included from
# bench/workloads/CMakeLists.txt, where hotpath_translate is defined; run by cmake -P as the test.
if(NOT CMAKE_SCRIPT_MODE_FILE)
  find_program(NIC_VALGRIND valgrind)
  if(NOT NIC_VALGRIND)
    return()
  endif()
  add_test(NAME bench_callgrind_warmup
    COMMAND ${CMAKE_COMMAND} -DVALGRIND=${NIC_VALGRIND} -DDRIVER=$<TARGET_FILE:hotpath_driver>
            -DTRANSLATE=$<TARGET_FILE:hotpath_translate>
            -DOUT=${PROJECT_BINARY_DIR}/tests/bench_callgrind_warmup -P ${CMAKE_CURRENT_LIST_FILE})
  set_tests_properties(bench_callgrind_warmup PROPERTIES LABELS bench TIMEOUT 300)
  return()
endif()

file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
set(ENV{NICMALLOC_BACKEND} sim)
set(ENV{NICMALLOC_CHUNK_SIZE} 64M)
foreach(run "${DRIVER};glibc" "${DRIVER};mimalloc" "${DRIVER};nic_control"
            "${DRIVER};nic_dataplane" "${TRANSLATE};translate_dp" "${TRANSLATE};translate_ctl"
            "${TRANSLATE};sga_add_arena" "${TRANSLATE};sga_add_cached")
  list(GET run 0 exe)
  list(GET run 1 name)
  set(file ${OUT}/callgrind.${name}.out)
  execute_process(COMMAND ${VALGRIND} --tool=callgrind --toggle-collect=loop_${name}
                          --callgrind-out-file=${file} ${exe} ${name} 0
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_FILE ${OUT}/callgrind.${name}.log)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "bench_callgrind_warmup: ${exe} ${name} 0 failed (status ${rc}); see "
                        "${OUT}/callgrind.${name}.log")
  endif()
  file(STRINGS ${file} summary REGEX "^summary:")
  string(REGEX MATCH "[0-9]+" total "${summary}")
  if(total STREQUAL "" OR total GREATER_EQUAL 1000)
    message(FATAL_ERROR "bench_callgrind_warmup: loop_${name} collected '${total}' instructions "
                        "with 0 calls: the warm-up runs inside the counted function")
  endif()
  message(STATUS "bench_callgrind_warmup: loop_${name}, 0 calls: ${total} instructions")
endforeach()
