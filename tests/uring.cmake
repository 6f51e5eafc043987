# The io_uring backend end to end over loopback TCP. It links the objects directly (its API is
# internal, hidden in the shared library). Included from tests/CMakeLists.txt.
if(NOT TARGET GTest::gtest)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
add_executable(test_uring_backend ${CMAKE_CURRENT_LIST_DIR}/regcache/test_uring_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/regcache/test_uring_stream.cc ${CMAKE_CURRENT_LIST_DIR}/regcache/test_uring_fd.cc
  ${CMAKE_CURRENT_LIST_DIR}/regcache/test_uring_progress.cc)
target_link_libraries(test_uring_backend PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest GTest::gtest_main
  Threads::Threads)
# Every wait in the suite has its own deadline; TIMEOUT is the last resort.
gtest_discover_tests(test_uring_backend PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)

# The public endpoint (nic_uring_endpoint_create) and the safety layer on io_uring over loopback:
# free-after-post, write-after-post (NICMALLOC_FENCE=wait) and many threads, as the sim suites
# do (issue #4). The default backend is uring; one case runs again under sim, where the endpoint
# starts uring beside it.
set(NIC_URING_SGA_ENV "NICMALLOC_BACKEND=uring;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_FENCE=wait")
foreach(suite test_uring_endpoint test_uring_safety test_uring_wait)
  add_executable(${suite} ${CMAKE_CURRENT_LIST_DIR}/safety/${suite}.cc)
  target_link_libraries(${suite} PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest GTest::gtest_main
    Threads::Threads)
  nic_gtest_with_env(${suite} ${NIC_URING_SGA_ENV})
endforeach()
gtest_discover_tests(test_uring_safety PROPERTIES TIMEOUT 300 DISCOVERY_TIMEOUT 60)

# A first start of the named backend under a shortage that passes (descriptors, address space):
# none meanwhile, then the named one. A process per case: the first start is the process's.
add_executable(test_backend_shortage ${CMAKE_CURRENT_LIST_DIR}/regcache/test_backend_shortage.cc)
target_link_libraries(test_backend_shortage PRIVATE nicmalloc GTest::gtest GTest::gtest_main)
target_compile_definitions(test_backend_shortage PRIVATE
  NIC_DPDK_PLUGIN_PATH="$<TARGET_FILE_DIR:nicmalloc>/libnicmalloc-dpdk.so")
foreach(case "NoDescriptorLeft;uring" "AddressSpaceLimit;uring" "DpdkWhoseEalFailedGivesWay;dpdk"
             "RefusalForNowIsSaidAsOne;uring" "AutoSaysNothingOfNoneWhenTheNextKindStarts;auto"
             "EventSetWithNoDescriptorLeft;uring"
             "SimStartedWithNoDescriptorLeftGetsItsEventFdLater;auto"
             "DpdkThatCannotRunIsSaidOnceWhileTheOthersAreShort;dpdk"
             "SimCompletionQueuedWithoutADescriptorWakesTheOneMadeLater;auto")
  list(GET case 0 name)
  list(GET case 1 backend)
  add_test(NAME backend_shortage_${name}
           COMMAND test_backend_shortage --gtest_filter=BackendShortage.${name})
  set_tests_properties(backend_shortage_${name} PROPERTIES TIMEOUT 120
    ENVIRONMENT "NICMALLOC_BACKEND=${backend};NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_DPDK_VDEV=net_null0")
endforeach()

# Registrations of memory whose pages change unseen (a thread's stack, a file's pages) are never
# sent stale.
add_executable(test_uring_stale ${CMAKE_CURRENT_LIST_DIR}/safety/test_uring_stale.cc)
target_link_libraries(test_uring_stale PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest GTest::gtest_main
  Threads::Threads)
nic_gtest_with_env(test_uring_stale ${NIC_URING_SGA_ENV})
gtest_discover_tests(test_uring_stale PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)
# nic_wait and nic_event_fd on io_uring: blocking waits and an epoll set instead of busy polling.
gtest_discover_tests(test_uring_wait PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)
gtest_discover_tests(test_uring_endpoint TEST_FILTER "-UringEndpointBesideSim.*"
                     PROPERTIES TIMEOUT 300 DISCOVERY_TIMEOUT 60)
# By path, not target name: the target's env(1) wrapper would set the backend back to uring.
add_test(NAME UringEndpointBesideSim.UnderSim
         COMMAND $<TARGET_FILE:test_uring_endpoint> --gtest_filter=UringEndpointBesideSim.*)
set_tests_properties(UringEndpointBesideSim.UnderSim PROPERTIES
  ENVIRONMENT "NICMALLOC_BACKEND=sim;NICMALLOC_CHUNK_SIZE=64M" TIMEOUT 60
  FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")

# Receiving (nic_endpoint_receive) on io_uring endpoints; UringReceiveSmall.* again with 4
# receive buffers of 4 KiB, where a datagram outgrows a buffer and every buffer is soon held.
add_executable(test_uring_receive ${CMAKE_CURRENT_LIST_DIR}/safety/test_uring_receive.cc)
target_link_libraries(test_uring_receive PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_uring_receive ${NIC_URING_SGA_ENV})
gtest_discover_tests(test_uring_receive
                     TEST_FILTER "-UringReceiveSmall.*:UringReceiveCapped.*:UringReceive.BuffersLargerThanAChunk*"
                     PROPERTIES TIMEOUT 300 DISCOVERY_TIMEOUT 60)
add_test(NAME UringReceiveSmall.WithFourBuffersOf4KiB
         COMMAND $<TARGET_FILE:test_uring_receive> --gtest_filter=UringReceiveSmall.*)
set_tests_properties(UringReceiveSmall.WithFourBuffersOf4KiB PROPERTIES
  ENVIRONMENT "NICMALLOC_BACKEND=uring;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_FENCE=wait;NICMALLOC_RECV_BUFFERS=4;NICMALLOC_RECV_BUFFER_SIZE=4K"
  TIMEOUT 120 FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
# Receive buffers that are together larger than a chunk: refused, and said why.
add_test(NAME UringReceive.BuffersLargerThanAChunkAreRefusedSayingWhy
         COMMAND $<TARGET_FILE:test_uring_receive>
                 --gtest_filter=UringReceive.BuffersLargerThanAChunkAreRefusedSayingWhy)
set_tests_properties(UringReceive.BuffersLargerThanAChunkAreRefusedSayingWhy PROPERTIES
  ENVIRONMENT "NICMALLOC_BACKEND=uring;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_RECV_BUFFER_SIZE=16M"
  TIMEOUT 60 FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
# The cap on held bytes over all endpoints (NICMALLOC_RECV_HELD_MAX), small enough that four
# endpoints of the default buffers reach it.
add_test(NAME UringReceiveCapped.With256KiBHeldMax
         COMMAND $<TARGET_FILE:test_uring_receive> --gtest_filter=UringReceiveCapped.*)
set_tests_properties(UringReceiveCapped.With256KiBHeldMax PROPERTIES
  ENVIRONMENT "NICMALLOC_BACKEND=uring;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_FENCE=wait;NICMALLOC_RECV_HELD_MAX=256K"
  TIMEOUT 120 FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")

# Another kind's destroy given an io_uring endpoint whose messages wait behind the held cap.
add_executable(test_wrong_destroy ${CMAKE_CURRENT_LIST_DIR}/safety/test_wrong_destroy.cc)
target_link_libraries(test_wrong_destroy PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_wrong_destroy ${NIC_URING_SGA_ENV} NICMALLOC_RECV_HELD_MAX=256K)
gtest_discover_tests(test_wrong_destroy PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)

# Messages that waited behind the held cap, handed over by another thread's poll: destroy is busy
# while their receive function runs, and waiters sleep meanwhile.
add_executable(test_uring_receive_drain ${CMAKE_CURRENT_LIST_DIR}/safety/test_uring_receive_drain.cc)
target_link_libraries(test_uring_receive_drain PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_uring_receive_drain ${NIC_URING_SGA_ENV} NICMALLOC_RECV_HELD_MAX=256K)
gtest_discover_tests(test_uring_receive_drain PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)

# A post that comes while a receiving endpoint's close waits for its receive to end.
add_executable(test_uring_receive_close ${CMAKE_CURRENT_LIST_DIR}/safety/test_uring_receive_close.cc)
target_link_libraries(test_uring_receive_close PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_uring_receive_close ${NIC_URING_SGA_ENV})
gtest_discover_tests(test_uring_receive_close PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)

# Empty datagrams waiting ahead of a message, with one receive buffer.
add_executable(test_uring_receive_empties
  ${CMAKE_CURRENT_LIST_DIR}/safety/test_uring_receive_empties.cc)
target_link_libraries(test_uring_receive_empties PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_uring_receive_empties ${NIC_URING_SGA_ENV} NICMALLOC_RECV_BUFFERS=1)
gtest_discover_tests(test_uring_receive_empties PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)

# A release on another thread right after the receive function returns, with one receive buffer.
# Its own program: it defines pthread_mutex_lock to meet the window every time.
add_executable(test_receive_release_race
  ${CMAKE_CURRENT_LIST_DIR}/safety/test_receive_release_race.cc)
target_link_libraries(test_receive_release_race PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_receive_release_race NICMALLOC_BACKEND=uring NICMALLOC_CHUNK_SIZE=64M
  NICMALLOC_RECV_BUFFERS=1)
gtest_discover_tests(test_receive_release_race PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)

# Several backends in one process: sim (the default, NICMALLOC_BACKEND=sim) and io_uring endpoints
# side by side, each started by its endpoint's constructor.
add_executable(test_multi_backend ${CMAKE_CURRENT_LIST_DIR}/safety/test_multi_backend.cc)
target_link_libraries(test_multi_backend PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
# A short release delay: steps emptied inside live chunks are given back within the test.
nic_gtest_with_env(test_multi_backend
  "NICMALLOC_BACKEND=sim;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_PIN_STEP=32M;NICMALLOC_FENCE=wait;NICMALLOC_RELEASE_DELAY_MS=50")
gtest_discover_tests(test_multi_backend PROPERTIES TIMEOUT 300 DISCOVERY_TIMEOUT 60)

# Memory io_uring cannot pin for writing (read-only, a disk file's shared mapping): copied, from
# nic_sga_add under uring and from nic_sga_post to a uring endpoint beside the sim.
add_executable(test_uring_readonly ${CMAKE_CURRENT_LIST_DIR}/safety/test_uring_readonly.cc)
target_link_libraries(test_uring_readonly PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest
  GTest::gtest_main Threads::Threads)
nic_gtest_with_env(test_uring_readonly ${NIC_URING_SGA_ENV})
gtest_discover_tests(test_uring_readonly TEST_FILTER "-UringReadOnlyBesideSim.*"
                     PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)
# By path, not target name: the target's env(1) wrapper would set the backend back to uring.
add_test(NAME UringReadOnlyBesideSim.UnderSim
         COMMAND $<TARGET_FILE:test_uring_readonly> --gtest_filter=UringReadOnlyBesideSim.*)
set_tests_properties(UringReadOnlyBesideSim.UnderSim PROPERTIES
  ENVIRONMENT "NICMALLOC_BACKEND=sim;NICMALLOC_CHUNK_SIZE=64M" TIMEOUT 60
  FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
