# Tests of the verbs and dpdk backend plugins (regcache/plugins.cmake). The suites dlopen the
# plugin that sits next to libnicmalloc.so, as backend.c does, and link rdma-core or DPDK
# themselves only to play the application's part (queue pairs, ports, receivers).
function(nic_add_plugin_suite name plugin)
  add_executable(${name} regcache/${name}.cc)
  target_link_libraries(${name} PRIVATE nicmalloc GTest::gtest GTest::gtest_main
    Threads::Threads ${CMAKE_DL_LIBS} ${ARGN})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/alloc/base ${PROJECT_SOURCE_DIR}/regcache/cache ${PROJECT_SOURCE_DIR}/regcache/dpdk ${PROJECT_SOURCE_DIR}/regcache/verbs)
  target_compile_definitions(${name} PRIVATE NIC_PLUGIN_DIR="$<TARGET_FILE_DIR:nicmalloc>")
  add_dependencies(${name} ${plugin})
  # Each test is a process of its own (EAL starts once per process); all are bounded.
  gtest_discover_tests(${name} PROPERTIES ENVIRONMENT "${NIC_TEST_ENV}" TIMEOUT 60
                       DISCOVERY_TIMEOUT 60)
endfunction()

if(TARGET nicmalloc-verbs)
  nic_add_plugin_suite(test_verbs_backend nicmalloc-verbs PkgConfig::NIC_IBVERBS)
endif()
if(TARGET nicmalloc-dpdk)
  nic_add_plugin_suite(test_dpdk_backend nicmalloc-dpdk PkgConfig::NIC_DPDK)
  # rte_eth_from_rings lives in the net_ring driver library, outside pkg-config's list.
  target_link_libraries(test_dpdk_backend PRIVATE rte_net_ring)
  target_compile_definitions(test_dpdk_backend PRIVATE ALLOW_EXPERIMENTAL_API)
endif()

# The public endpoint constructors of dpdk and verbs, through libnicmalloc.so as applications use
# them: one process per backend setting. The dpdk and sim runs must not skip (the dpdk backend is
# real here); the verbs device case skips, saying why, where there is no RDMA device.
if(TARGET nicmalloc-dpdk AND TARGET nicmalloc-verbs)
  add_executable(test_public_endpoints safety/test_public_endpoints.cc)
  target_link_libraries(test_public_endpoints PRIVATE nicmalloc GTest::gtest GTest::gtest_main
    PkgConfig::NIC_DPDK PkgConfig::NIC_IBVERBS rte_net_ring)
  target_compile_definitions(test_public_endpoints PRIVATE ALLOW_EXPERIMENTAL_API
    NIC_PLUGIN_DIR="$<TARGET_FILE_DIR:nicmalloc>")
  add_dependencies(test_public_endpoints nicmalloc-dpdk nicmalloc-verbs)
  foreach(run "dpdk;DpdkEndpoint;NICMALLOC_DPDK_VDEV=net_ring0" "sim;OtherBackendEndpoints;"
              "verbs;VerbsEndpoint;")
    list(GET run 0 backend)
    list(GET run 1 suite)
    list(GET run 2 extra)
    add_test(NAME public_endpoints_${backend}
             COMMAND test_public_endpoints --gtest_filter=${suite}.*)
    set_tests_properties(public_endpoints_${backend} PROPERTIES TIMEOUT 120
      ENVIRONMENT "NICMALLOC_BACKEND=${backend};NICMALLOC_CHUNK_SIZE=64M;${extra}")
    if(NOT backend STREQUAL "verbs")
      set_tests_properties(public_endpoints_${backend} PROPERTIES
        FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
    endif()
  endforeach()
endif()

# Receiving on the dpdk backend through libnicmalloc.so: net_ring0 (the sender's very mbufs) and
# net_af_packet0 on a veth pair the test makes in a namespace of its own (it skips, saying why,
# where it cannot make one: not root, no iproute2).
if(TARGET nicmalloc-dpdk)
  add_executable(test_dpdk_receive safety/test_dpdk_receive.cc)
  # DPDK itself only to play the application's part (a port pair of its own).
  target_link_libraries(test_dpdk_receive PRIVATE nicmalloc GTest::gtest GTest::gtest_main
    PkgConfig::NIC_DPDK rte_net_ring)
  target_compile_definitions(test_dpdk_receive PRIVATE ALLOW_EXPERIMENTAL_API)
  add_dependencies(test_dpdk_receive nicmalloc-dpdk)
  foreach(run "ring;DpdkReceiveRing;net_ring0" "af_packet;DpdkReceiveAfPacket;net_af_packet0,iface=veth-a")
    list(GET run 0 name)
    list(GET run 1 suite)
    list(GET run 2 vdev)
    add_test(NAME dpdk_receive_${name} COMMAND test_dpdk_receive --gtest_filter=${suite}.*)
    set_tests_properties(dpdk_receive_${name} PROPERTIES TIMEOUT 120
      ENVIRONMENT "NICMALLOC_BACKEND=dpdk;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_DPDK_VDEV=${vdev}")
  endforeach()
  set_tests_properties(dpdk_receive_ring PROPERTIES FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endif()
