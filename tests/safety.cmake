# Safety layer (safety/): the scatter-gather array, free protection and holds, write fencing,
# all on the sim backend with slow, randomized DMA delays (50 us to 5 ms, drawn by seed), so a
# buffer freed or rewritten after post would show up as wrong bytes at the receiver. Internal
# units: they link the objects, as test_register does.
set(NIC_SAFETY_DELAYS ${CMAKE_CURRENT_BINARY_DIR}/safety_delays.txt)
file(WRITE ${NIC_SAFETY_DELAYS} "# microseconds, drawn at random per post\n50\n80\n120\n200\n300\n500\n800\n1200\n2000\n5000\n")
set(NIC_SAFETY_ENV "NICMALLOC_BACKEND=sim;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_SIM_DELAYS=${NIC_SAFETY_DELAYS};NICMALLOC_SIM_SEED=7")
foreach(suite test_sga test_free_protection test_fence test_receive)
  add_executable(${suite} ${CMAKE_CURRENT_LIST_DIR}/safety/${suite}.cc)
  target_link_libraries(${suite} PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest GTest::gtest_main
    Threads::Threads)
  nic_gtest_with_env(${suite} ${NIC_SAFETY_ENV})
  gtest_discover_tests(${suite} PROPERTIES TIMEOUT 300 DISCOVERY_TIMEOUT 60)
endforeach()
# test_sga runs nic_probe too, for an array in a process where no backend could open.
target_sources(test_sga PRIVATE ${CMAKE_CURRENT_LIST_DIR}/probe_runner.cc)
target_compile_definitions(test_sga PRIVATE NIC_PROBE_PATH="$<TARGET_FILE:nic_probe>")
add_dependencies(test_sga nic_probe)

# A sim endpoint's receiver replaced while messages arrive on the NIC's thread: no DMA delay,
# so that the receiver changes many times a message.
add_executable(test_sim_receive_swap ${CMAKE_CURRENT_LIST_DIR}/safety/test_sim_receive_swap.cc)
target_link_libraries(test_sim_receive_swap PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_sim_receive_swap NICMALLOC_BACKEND=sim NICMALLOC_CHUNK_SIZE=64M
  NICMALLOC_SIM_DELAYS=fixed:0)
gtest_discover_tests(test_sim_receive_swap PROPERTIES TIMEOUT 300 DISCOVERY_TIMEOUT 60)

# The sim endpoint's errors, counted and said once: a wrong destroy, a message with no receive
# buffer (a dataplane request over a chunk, refused under fail).
add_executable(test_sim_endpoint_errors ${CMAKE_CURRENT_LIST_DIR}/safety/test_sim_endpoint_errors.cc)
target_link_libraries(test_sim_endpoint_errors PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_sim_endpoint_errors NICMALLOC_BACKEND=sim NICMALLOC_CHUNK_SIZE=64M
  NICMALLOC_ON_PIN_FAIL=fail)
gtest_discover_tests(test_sim_endpoint_errors PROPERTIES TIMEOUT 60 DISCOVERY_TIMEOUT 60)

# nic_endpoint_id: a number per endpoint, never given again, on sim endpoints (whose pool gives a
# destroyed endpoint's address to the next one).
add_executable(test_endpoint_id ${CMAKE_CURRENT_LIST_DIR}/safety/test_endpoint_id.cc)
target_link_libraries(test_endpoint_id PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_endpoint_id NICMALLOC_BACKEND=sim NICMALLOC_CHUNK_SIZE=64M)
gtest_discover_tests(test_endpoint_id PROPERTIES TIMEOUT 60 DISCOVERY_TIMEOUT 60)

# NICMALLOC_FENCE=protect with each mechanism (userfaultfd, mprotect + SIGSEGV): the suite
# switches between them itself. detect needs the setting from the start (it records allocation
# sites), so it runs in an environment of its own.
foreach(suite test_fence_protect test_fence_detect)
  add_executable(${suite} ${CMAKE_CURRENT_LIST_DIR}/safety/${suite}.cc)
  target_link_libraries(${suite} PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest GTest::gtest_main
    Threads::Threads)
endforeach()
# protect also runs nic_probe, for scenarios that need a fresh process.
target_sources(test_fence_protect PRIVATE ${CMAKE_CURRENT_LIST_DIR}/probe_runner.cc)
target_compile_definitions(test_fence_protect PRIVATE NIC_PROBE_PATH="$<TARGET_FILE:nic_probe>")
add_dependencies(test_fence_protect nic_probe)
# The sites detect must name live in a library of their own (see safety/fence_detect_sites.c); they
# call the runtime linked into the test executable, which exports it.
add_library(fence_detect_sites SHARED ${CMAKE_CURRENT_LIST_DIR}/safety/fence_detect_sites.c)
target_include_directories(fence_detect_sites PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(test_fence_detect PRIVATE fence_detect_sites)
set_target_properties(test_fence_detect PROPERTIES ENABLE_EXPORTS ON)
# The protect suite counts in 4 KiB pages; on hugetlb chunks (chosen when the machine's pool has
# free pages) the kernel protects a whole 2 MiB page, which is its own case (safety/README.md).
nic_gtest_with_env(test_fence_protect ${NIC_SAFETY_ENV} NICMALLOC_FENCE=protect NICMALLOC_PAGE_KIND=4k)
nic_gtest_with_env(test_fence_detect ${NIC_SAFETY_ENV} NICMALLOC_FENCE=detect)
foreach(suite test_fence_protect test_fence_detect)
  gtest_discover_tests(${suite} PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)
endforeach()

# protect and the pass that gives back free 4 KiB pages inside dataplane pages in use: on 4 KiB
# pages, with the release and purge delays beyond the test, so that only the test's own pass runs.
add_executable(test_fence_sub_pages ${CMAKE_CURRENT_LIST_DIR}/safety/test_fence_sub_pages.cc)
target_link_libraries(test_fence_sub_pages PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_fence_sub_pages ${NIC_SAFETY_ENV} NICMALLOC_FENCE=protect
  NICMALLOC_PAGE_KIND=4k NICMALLOC_RELEASE_DELAY_MS=3600000 NICMALLOC_PURGE_DELAY_MS=3600000)
gtest_discover_tests(test_fence_sub_pages PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)

# protect and the lock a registration takes on a step used unpinned (RLIMIT_MEMLOCK had no room),
# once room came back: on 4 KiB pages, the fence's timeout beyond the test's deadlines.
add_executable(test_fence_lock_again ${CMAKE_CURRENT_LIST_DIR}/safety/test_fence_lock_again.cc)
target_link_libraries(test_fence_lock_again PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_fence_lock_again ${NIC_SAFETY_ENV} NICMALLOC_FENCE=protect
  NICMALLOC_PAGE_KIND=4k NICMALLOC_FENCE_TIMEOUT_MS=30000 NICMALLOC_ON_PIN_FAIL=fallback)
gtest_discover_tests(test_fence_lock_again PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)

# Translation-cache pressure, once with a tiny NIC cache (pressure, copies) and once with the
# default one (none); then the signal's own cases, each in a process of its own (the model is
# the process's) with the cache it needs: a preset, or a number of entries.
add_executable(test_pressure safety/test_pressure.cc)
target_link_libraries(test_pressure PRIVATE nicmalloc GTest::gtest GTest::gtest_main)
function(nic_pressure_test name test cache)
  add_test(NAME ${name} COMMAND test_pressure --gtest_filter=Pressure.${test})
  set(env "NICMALLOC_BACKEND=sim;NICMALLOC_SIM_DELAYS=fixed:20")
  if(cache MATCHES "^[0-9]+$")
    set(env "${env};NICMALLOC_SIM_TCACHE_ENTRIES=${cache}")
  elseif(cache)
    set(env "${env};NICMALLOC_SIM_TCACHE=${cache}")
  endif()
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${env}" TIMEOUT 120)
endfunction()
nic_pressure_test(pressure_tiny_cache ManyRegionsInATinyCacheCopySmallNewEntries tiny)
nic_pressure_test(pressure_default_cache ManyRegionsInATinyCacheCopySmallNewEntries "")
nic_pressure_test(pressure_every_lookup_missing EveryLookupMissingGoesPastTheCapacity "")
nic_pressure_test(pressure_copies_age_the_window CopiesAgeTheWindowSoThePressureFalls tiny)
nic_pressure_test(pressure_hysteresis CopyingStopsOnlyUnderNinetyPercent tiny)
nic_pressure_test(pressure_busiest TheBusiestDataplaneRegionsAreNamedByChunkAndStep "")
nic_pressure_test(pressure_rounds_up OneEntryOverTheCapacityShowsOverOneHundredPercent 200)
