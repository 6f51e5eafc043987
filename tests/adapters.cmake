# The serializer adapters (include/nicmalloc/*.h), each over the public API on sim (slow random
# DMA delays, so a byte rewritten after post shows), on io_uring over loopback TCP, where the
# verbs plugin is built on the software RDMA device (tests/regcache/soft_verbs.h: a QP connected
# to itself, receiving into the plugin's 64 KiB buffers) and, where the dpdk plugin is built, on
# DPDK net_ring0 (tests/adapters/wire.h), once per fence mode (protect on the sim only, below):
# under detect no mismatch may be reported, under protect no writer held.
# Included from tests/CMakeLists.txt; a serializer that is not installed skips its suite. The dpdk runs skip,
# saying why, where EAL cannot start; ctest fails such a skip, as the other dpdk tests do.
set(NIC_ADAPTER_ENV_sim NICMALLOC_BACKEND=sim NICMALLOC_SIM_DELAYS=${NIC_SAFETY_DELAYS}
  NICMALLOC_SIM_SEED=7)
set(NIC_ADAPTER_ENV_uring NICMALLOC_BACKEND=uring)
set(NIC_ADAPTER_ENV_dpdk NICMALLOC_BACKEND=dpdk NICMALLOC_DPDK_VDEV=net_ring0)
set(NIC_ADAPTER_BACKENDS sim uring)
# The soft device under the public calls, as verbs_soft_public runs it (tests/plugins.cmake): a
# copy of libnicmalloc.so beside a verbs plugin built against the device, which the suite
# compiles in and exports.
if(TARGET nicmalloc-verbs-soft)
  set(NIC_ADAPTER_ENV_verbs NICMALLOC_BACKEND=verbs
    LD_LIBRARY_PATH=${CMAKE_CURRENT_BINARY_DIR}/soft_verbs)
  list(APPEND NIC_ADAPTER_BACKENDS verbs)
endif()
if(TARGET nicmalloc-dpdk)
  list(APPEND NIC_ADAPTER_BACKENDS dpdk)
endif()
# nic_add_adapter_suite(name sources... LIBS libs...): a test per backend and fence mode.
function(nic_add_adapter_suite name)
  cmake_parse_arguments(PARSE_ARGV 1 SUITE "" "" "LIBS")
  add_executable(${name} ${SUITE_UNPARSED_ARGUMENTS})
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_BINARY_DIR}
    ${CMAKE_CURRENT_SOURCE_DIR}/adapters ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PRIVATE nicmalloc ${SUITE_LIBS} GTest::gtest GTest::gtest_main)
  # The adapters are headers, compiled into the user's program: undefined behaviour in them fails
  # the suites instead of passing unseen (a memcpy from an empty vector's NULL data() did).
  target_compile_options(${name} PRIVATE -fsanitize=undefined -fno-sanitize-recover=undefined)
  target_link_options(${name} PRIVATE -fsanitize=undefined)
  if(TARGET nicmalloc-dpdk)
    add_dependencies(${name} nicmalloc-dpdk)
  endif()
  if(TARGET nicmalloc-verbs-soft)
    target_sources(${name} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/regcache/soft_verbs.c)
    target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/regcache
      $<TARGET_PROPERTY:PkgConfig::NIC_IBVERBS,INTERFACE_INCLUDE_DIRECTORIES>)
    target_compile_definitions(${name} PRIVATE NIC_ADAPTERS_SOFT_VERBS=1)
    set_target_properties(${name} PROPERTIES ENABLE_EXPORTS ON)
    add_dependencies(${name} nicmalloc-verbs-soft nicmalloc-soft-copy)
  endif()
  foreach(backend ${NIC_ADAPTER_BACKENDS})
    foreach(fence wait protect detect)
      # Under protect only on the sim. On a loopback transport in one process (io_uring over
      # loopback TCP, the soft verbs QP connected to itself, DPDK net_ring0) a post completes
      # only once the same program has received it (io_uring's zero-copy notification comes
      # after the reader took the bytes; the soft QP's send lands in a receive the program
      # posts back from its polls; net_ring's receiver frees the very mbufs), and receive
      # functions run only from the program's own polls, never on nicmalloc's threads. A write
      # that protect holds on the program's only thread then waits for a completion only that
      # thread can bring, until NICMALLOC_FENCE_TIMEOUT_MS (the protobuf suite's split message: 1
      # of 4 full runs on io_uring, every run on net_ring). A peer in another process or thread
      # does not meet this (examples/kv_capnp runs under protect); such a loopback program uses
      # wait or detect.
      if(NOT backend STREQUAL "sim" AND fence STREQUAL "protect")
        continue()
      endif()
      # Protect fences whole pages: on hugetlb chunks (chosen when the machine's pool has free
      # pages) a post holds the writers of every block on its 2 MiB page (safety/README.md), which
      # these suites count as a writer held. Small pages keep the result the machine's own.
      set(page_kind "")
      if(fence STREQUAL "protect")
        set(page_kind ";NICMALLOC_PAGE_KIND=4k")
      endif()
      # Cases named *Large take more memory and time than a run of every backend and fence
      # mode should, and cases named *Faulty make a transport fail through settings of their
      # own: their own runs below.
      add_test(NAME ${name}_${backend}_${fence} COMMAND ${name} --gtest_filter=-*Large.*:*Faulty.*)
      set_tests_properties(${name}_${backend}_${fence} PROPERTIES TIMEOUT 300 ENVIRONMENT
        "${NIC_ADAPTER_ENV_${backend}};NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_FENCE=${fence}${page_kind}")
      if(backend STREQUAL "dpdk")
        set_tests_properties(${name}_${backend}_${fence} PROPERTIES
          FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
      endif()
    endforeach()
  endforeach()
endfunction()

find_package(CapnProto QUIET)
if(CapnProto_FOUND)
  set(CAPNPC_SRC_PREFIX ${CMAKE_CURRENT_LIST_DIR}/adapters)
  set(CAPNPC_OUTPUT_DIR ${CMAKE_CURRENT_BINARY_DIR})
  capnp_generate_cpp(NIC_CAPNP_SRCS NIC_CAPNP_HDRS ${CMAKE_CURRENT_LIST_DIR}/adapters/adapters_test.capnp)
  nic_add_adapter_suite(test_capnp_adapter ${CMAKE_CURRENT_LIST_DIR}/adapters/test_capnp_adapter.cc
    ${NIC_CAPNP_SRCS} LIBS CapnProto::capnp)
else()
  message(STATUS "Cap'n Proto not found: test_capnp_adapter is not built (apt-get install libcapnp-dev capnproto)")
endif()

find_program(NIC_FLATC flatc)
find_path(NIC_FLATBUFFERS_INCLUDE flatbuffers/flatbuffers.h)
if(NIC_FLATC AND NIC_FLATBUFFERS_INCLUDE)
  set(NIC_FB_HDR ${CMAKE_CURRENT_BINARY_DIR}/adapters_test_generated.h)
  add_custom_command(OUTPUT ${NIC_FB_HDR}
    COMMAND ${NIC_FLATC} --cpp -o ${CMAKE_CURRENT_BINARY_DIR}
            ${CMAKE_CURRENT_LIST_DIR}/adapters/adapters_test.fbs
    DEPENDS ${CMAKE_CURRENT_LIST_DIR}/adapters/adapters_test.fbs
    COMMENT "flatc adapters_test.fbs")
  nic_add_adapter_suite(test_flatbuffers_adapter
    ${CMAKE_CURRENT_LIST_DIR}/adapters/test_flatbuffers_adapter.cc ${NIC_FB_HDR})
  # A buffer of 200 MiB in dataplane memory (a chunk of 512 MiB: in one of 64 MiB it would be
  # control memory, one registration), over the sim's 32 entries of 4 MiB steps. About 0.6 GiB
  # and a second.
  add_test(NAME test_flatbuffers_adapter_large
           COMMAND test_flatbuffers_adapter --gtest_filter=FlatbuffersAdapterLarge.*)
  set_tests_properties(test_flatbuffers_adapter_large PROPERTIES TIMEOUT 300
    ENVIRONMENT "${NIC_ADAPTER_ENV_sim};NICMALLOC_CHUNK_SIZE=512M;NICMALLOC_FENCE=wait"
    FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
else()
  message(STATUS "FlatBuffers not found: test_flatbuffers_adapter is not built (apt-get install libflatbuffers-dev flatbuffers-compiler)")
endif()

find_package(Protobuf QUIET)
if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE)
  protobuf_generate_cpp(NIC_PB_SRCS NIC_PB_HDRS ${CMAKE_CURRENT_LIST_DIR}/adapters/adapters_test.proto
    ${CMAKE_CURRENT_LIST_DIR}/adapters/adapters_test_required.proto)
  nic_add_adapter_suite(test_protobuf_adapter
    ${CMAKE_CURRENT_LIST_DIR}/adapters/test_protobuf_adapter.cc ${NIC_PB_SRCS}
    LIBS protobuf::libprotobuf)
  # A part that completes with an error cuts the stream (include/nicmalloc/sg_post.h): on the
  # sim, under NICMALLOC_ON_PIN_FAIL=fail, a part longer than a chunk (64 MiB) finds no receive
  # buffer and its post completes with -ENOMEM; and an endpoint made at a cut one's address after
  # its destroy posts normally. About 0.2 GiB.
  add_test(NAME test_protobuf_adapter_faulty
           COMMAND test_protobuf_adapter --gtest_filter=ProtobufAdapterFaulty.*)
  set_tests_properties(test_protobuf_adapter_faulty PROPERTIES TIMEOUT 300
    ENVIRONMENT "${NIC_ADAPTER_ENV_sim};NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_FENCE=wait;NICMALLOC_ON_PIN_FAIL=fail"
    FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
else()
  message(STATUS "Protobuf not found: test_protobuf_adapter is not built (apt-get install libprotobuf-dev protobuf-compiler)")
endif()

# What the adapters share (include/nicmalloc/sg_post.h): a child of fork uses them while threads
# of its parent were inside them, and a library built with them that is unloaded leaves no fork
# handler behind (ProcessWide), the FlatBuffers and Protobuf singletons too where those are
# installed. Once, on the sim: what it tests is no backend's.
add_executable(test_sg_post_adapters ${CMAKE_CURRENT_LIST_DIR}/adapters/test_sg_post.cc)
target_include_directories(test_sg_post_adapters PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(test_sg_post_adapters PRIVATE nicmalloc GTest::gtest GTest::gtest_main
  ${CMAKE_DL_LIBS})
add_library(sg_post_module MODULE ${CMAKE_CURRENT_LIST_DIR}/adapters/sg_post_module.cc)
target_include_directories(sg_post_module PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(sg_post_module PRIVATE nicmalloc)
set_target_properties(sg_post_module PROPERTIES CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)
target_compile_definitions(test_sg_post_adapters PRIVATE
  NIC_SG_POST_MODULE="$<TARGET_FILE:sg_post_module>")
add_dependencies(test_sg_post_adapters sg_post_module)
if(NIC_FLATC AND NIC_FLATBUFFERS_INCLUDE)
  target_compile_definitions(test_sg_post_adapters PRIVATE NIC_WITH_FLATBUFFERS=1)
endif()
if(Protobuf_FOUND)
  target_compile_definitions(test_sg_post_adapters PRIVATE NIC_WITH_PROTOBUF=1)
  target_link_libraries(test_sg_post_adapters PRIVATE protobuf::libprotobuf)
endif()
add_test(NAME test_sg_post_adapters COMMAND test_sg_post_adapters)
set_tests_properties(test_sg_post_adapters PROPERTIES TIMEOUT 300 ENVIRONMENT
  "${NIC_ADAPTER_ENV_sim};NICMALLOC_CHUNK_SIZE=64M;NICMALLOC_FENCE=wait")
