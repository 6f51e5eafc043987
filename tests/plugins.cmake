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
  # The receive buffers' books, which make no rdma-core call: built from the plugin's source and
  # run everywhere, device or not.
  add_executable(test_verbs_rx regcache/test_verbs_rx.cc
    ${PROJECT_SOURCE_DIR}/regcache/verbs/verbs_rx.c)
  target_include_directories(test_verbs_rx PRIVATE ${PROJECT_SOURCE_DIR}/regcache/verbs)
  target_link_libraries(test_verbs_rx PRIVATE GTest::gtest GTest::gtest_main
    PkgConfig::NIC_IBVERBS)
  gtest_discover_tests(test_verbs_rx PROPERTIES TIMEOUT 60 DISCOVERY_TIMEOUT 60)
  # The plugin's receive paths run for real on a software device (regcache/soft_verbs.h): built
  # from the plugin's sources with that device in place of libibverbs, whose headers alone it
  # takes. Runs everywhere; the VerbsDevice suite repeats the checks on a real device.
  add_executable(test_verbs_soft regcache/test_verbs_soft.cc regcache/soft_verbs.c
    ${PROJECT_SOURCE_DIR}/regcache/verbs/verbs.c ${PROJECT_SOURCE_DIR}/regcache/verbs/verbs_rx.c
    ${PROJECT_SOURCE_DIR}/regcache/cache/plugin_services.c)
  target_include_directories(test_verbs_soft PRIVATE ${PROJECT_SOURCE_DIR}/regcache/verbs
    ${PROJECT_SOURCE_DIR}/regcache/cache ${PROJECT_SOURCE_DIR}/alloc/base
    $<TARGET_PROPERTY:PkgConfig::NIC_IBVERBS,INTERFACE_INCLUDE_DIRECTORIES>)
  target_link_libraries(test_verbs_soft PRIVATE nicmalloc GTest::gtest GTest::gtest_main
    Threads::Threads)
  gtest_discover_tests(test_verbs_soft PROPERTIES ENVIRONMENT "${NIC_TEST_ENV}" TIMEOUT 60
                       DISCOVERY_TIMEOUT 60)
  # The same device under the public calls: a copy of libnicmalloc.so in a directory of its own
  # (LD_LIBRARY_PATH wins over the test's RUNPATH), beside a verbs plugin built from the same
  # sources without libibverbs, whose rdma-core calls the test program defines and exports.
  set(soft_dir ${CMAKE_CURRENT_BINARY_DIR}/soft_verbs)
  add_library(nicmalloc-verbs-soft MODULE ${PROJECT_SOURCE_DIR}/regcache/verbs/verbs.c
    ${PROJECT_SOURCE_DIR}/regcache/verbs/verbs_rx.c
    ${PROJECT_SOURCE_DIR}/regcache/cache/plugin_services.c)
  set_target_properties(nicmalloc-verbs-soft PROPERTIES PREFIX lib OUTPUT_NAME nicmalloc-verbs
    LIBRARY_OUTPUT_DIRECTORY ${soft_dir} C_VISIBILITY_PRESET hidden)
  target_include_directories(nicmalloc-verbs-soft PRIVATE ${PROJECT_SOURCE_DIR}/regcache/verbs
    ${PROJECT_SOURCE_DIR}/regcache/cache ${PROJECT_SOURCE_DIR}/alloc/base
    ${PROJECT_SOURCE_DIR}/include
    $<TARGET_PROPERTY:PkgConfig::NIC_IBVERBS,INTERFACE_INCLUDE_DIRECTORIES>)
  target_link_options(nicmalloc-verbs-soft PRIVATE
    -Wl,--version-script=${PROJECT_SOURCE_DIR}/regcache/verbs/verbs.map)
  add_custom_target(nicmalloc-soft-copy
    COMMAND ${CMAKE_COMMAND} -E make_directory ${soft_dir}
    COMMAND ${CMAKE_COMMAND} -E copy_if_different $<TARGET_FILE:nicmalloc>
            ${soft_dir}/$<TARGET_SONAME_FILE_NAME:nicmalloc>
    DEPENDS nicmalloc)
  add_executable(test_verbs_soft_public safety/test_verbs_soft_public.cc regcache/soft_verbs.c)
  set_target_properties(test_verbs_soft_public PROPERTIES ENABLE_EXPORTS ON)
  target_include_directories(test_verbs_soft_public PRIVATE
    $<TARGET_PROPERTY:PkgConfig::NIC_IBVERBS,INTERFACE_INCLUDE_DIRECTORIES>)
  target_link_libraries(test_verbs_soft_public PRIVATE nicmalloc GTest::gtest GTest::gtest_main
    Threads::Threads)
  add_dependencies(test_verbs_soft_public nicmalloc-verbs-soft nicmalloc-soft-copy)
  add_test(NAME verbs_soft_public COMMAND test_verbs_soft_public)
  set_tests_properties(verbs_soft_public PROPERTIES TIMEOUT 60
    ENVIRONMENT "NICMALLOC_BACKEND=verbs;NICMALLOC_CHUNK_SIZE=64M;LD_LIBRARY_PATH=${soft_dir}"
    FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
endif()
if(TARGET nicmalloc-dpdk)
  nic_add_plugin_suite(test_dpdk_backend nicmalloc-dpdk PkgConfig::NIC_DPDK)
  # rte_eth_from_rings lives in the net_ring driver library, outside pkg-config's list.
  target_link_libraries(test_dpdk_backend PRIVATE rte_net_ring)
  target_compile_definitions(test_dpdk_backend PRIVATE ALLOW_EXPERIMENTAL_API)
  # The plugin found beside libnicmalloc.so's real file, however the loader found the library.
  add_executable(plugin_dir_probe regcache/plugin_dir_probe.c)
  target_link_libraries(plugin_dir_probe PRIVATE nicmalloc)
  add_dependencies(plugin_dir_probe nicmalloc-dpdk)
  # A plugin of another nicmalloc's backend layout, in a directory of its own.
  add_library(old_dpdk_plugin MODULE regcache/old_plugin.c)
  set_target_properties(old_dpdk_plugin PROPERTIES OUTPUT_NAME nicmalloc-dpdk PREFIX lib
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/old_plugin)
  add_dependencies(plugin_dir_probe old_dpdk_plugin)
  add_test(NAME plugin_dir_relative_and_linked COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/regcache/plugin_dir.sh
           $<TARGET_FILE:plugin_dir_probe> $<TARGET_FILE_DIR:nicmalloc>
           $<TARGET_FILE:old_dpdk_plugin>)
  set_tests_properties(plugin_dir_relative_and_linked PROPERTIES TIMEOUT 120)

  # The DMA mappings of a registration, which no port here makes: built from the plugin's source
  # with the test's own rte_dev_dma_map and rte_dev_dma_unmap.
  add_executable(test_dpdk_dma regcache/test_dpdk_dma.cc regcache/dpdk_dma_reg.c
    ${PROJECT_SOURCE_DIR}/regcache/dpdk/dpdk_dma.c)
  target_include_directories(test_dpdk_dma PRIVATE ${PROJECT_SOURCE_DIR}/regcache/dpdk
    ${PROJECT_SOURCE_DIR}/regcache/cache ${PROJECT_SOURCE_DIR}/alloc/base
    ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(test_dpdk_dma PRIVATE ALLOW_EXPERIMENTAL_API)
  target_link_libraries(test_dpdk_dma PRIVATE GTest::gtest GTest::gtest_main PkgConfig::NIC_DPDK)
  gtest_discover_tests(test_dpdk_dma PROPERTIES TIMEOUT 60 DISCOVERY_TIMEOUT 60)

  # Which ports reach memory through the CPU alone, on every vdev that can be made here: built
  # from the plugin's source, EAL started as an application would.
  add_executable(test_dpdk_ports regcache/test_dpdk_ports.cc
    ${PROJECT_SOURCE_DIR}/regcache/dpdk/dpdk_ports.c)
  target_include_directories(test_dpdk_ports PRIVATE ${PROJECT_SOURCE_DIR}/regcache/dpdk
    ${PROJECT_SOURCE_DIR}/regcache/cache ${PROJECT_SOURCE_DIR}/alloc/base
    ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(test_dpdk_ports PRIVATE GTest::gtest GTest::gtest_main PkgConfig::NIC_DPDK)
  gtest_discover_tests(test_dpdk_ports PROPERTIES TIMEOUT 60 DISCOVERY_TIMEOUT 60
                       FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
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
  # The application's own EAL, its port attached through the public header before the backend
  # opens: no NICMALLOC_DPDK_VDEV, the backend must start no EAL of its own.
  add_test(NAME public_endpoints_dpdk_application_eal
           COMMAND test_public_endpoints --gtest_filter=DpdkApplicationEal.*)
  set_tests_properties(public_endpoints_dpdk_application_eal PROPERTIES TIMEOUT 120
    ENVIRONMENT "NICMALLOC_BACKEND=dpdk;NICMALLOC_CHUNK_SIZE=64M")
  # nic_event_fd's set handed out under sim, then dpdk (no event descriptor) started beside it.
  add_test(NAME public_endpoints_dpdk_after_event_fd
           COMMAND test_public_endpoints --gtest_filter=DpdkAfterEventFd.*)
  set_tests_properties(public_endpoints_dpdk_after_event_fd PROPERTIES TIMEOUT 120
    FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]" ENVIRONMENT
    "NICMALLOC_BACKEND=sim;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_DPDK_VDEV=net_ring0")
  # dpdk's receive pool under sim: registered with dpdk, not only with the default backend.
  add_test(NAME public_endpoints_dpdk_beside_sim
           COMMAND test_public_endpoints --gtest_filter=DpdkBesideSim.*)
  set_tests_properties(public_endpoints_dpdk_beside_sim PROPERTIES TIMEOUT 120
    FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]" ENVIRONMENT
    "NICMALLOC_BACKEND=sim;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_DPDK_VDEV=net_ring0")
endif()

# DPDK's extmem areas run out under registration-cache regions: the cache gives idle ones back.
# Each case in a process of its own (whether a step came first decides where the areas go).
if(TARGET nicmalloc-dpdk)
  add_executable(test_dpdk_room regcache/test_dpdk_room.cc)
  target_link_libraries(test_dpdk_room PRIVATE nicmalloc GTest::gtest GTest::gtest_main)
  add_dependencies(test_dpdk_room nicmalloc-dpdk)
  foreach(name AStepTakesTheAreaOfAnIdleCachedRegion ControlMemoryRegistersPastTheAreas)
    add_test(NAME dpdk_room_${name} COMMAND test_dpdk_room --gtest_filter=DpdkRoom.${name})
    set_tests_properties(dpdk_room_${name} PROPERTIES TIMEOUT 120
      FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
      ENVIRONMENT "NICMALLOC_BACKEND=dpdk;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_DPDK_VDEV=net_ring0")
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
  # Two ports of nicmalloc's own, sharing its receive pool.
  add_test(NAME dpdk_receive_null COMMAND test_dpdk_receive --gtest_filter=DpdkReceiveNull.*)
  set_tests_properties(dpdk_receive_null PROPERTIES TIMEOUT 120
    FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]" ENVIRONMENT
    "NICMALLOC_BACKEND=dpdk;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_DPDK_VDEV=net_null0\\;net_null1")
  # Ports whose driver takes nothing from that pool (net_ring) beside one another, and beside one
  # that fills from it.
  foreach(run "rings;DpdkReceiveRings;net_ring0|net_ring1"
              "null_and_ring;DpdkReceiveNullAndRing;net_null0|net_ring1")
    list(GET run 0 name)
    list(GET run 1 suite)
    list(GET run 2 vdevs)
    string(REPLACE "|" "\\;" vdev "${vdevs}")
    add_test(NAME dpdk_receive_${name} COMMAND test_dpdk_receive --gtest_filter=${suite}.*)
    set_tests_properties(dpdk_receive_${name} PROPERTIES TIMEOUT 120
      FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]" ENVIRONMENT
      "NICMALLOC_BACKEND=dpdk;NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_DPDK_VDEV=${vdev}")
  endforeach()
endif()
