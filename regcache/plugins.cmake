# The verbs and dpdk backends are plugins (MODULE libraries) that backend.c dlopens from the
# directory of libnicmalloc.so, only when NICMALLOC_BACKEND picks them: preloading the allocator
# must never drag rdma-core or DPDK (and their constructors) into every program.
#
# They do not link the runtime's layers: they are loaded into a process that already has
# libnicmalloc, whose symbols are hidden. Their open call gets the host's services instead
# (cache/plugin_host.h: its logger, control memory, API-error counts), reached through
# cache/plugin_services.c, so no new symbol leaves libnicmalloc. Their settings are handed over
# typed before that (nic_backend_<name>_settings, cache/backend.h).
# Each exports only nic_backend_<name>_open, nic_backend_<name>_settings and its nic_<name>_* API
# (see verbs.h, dpdk.h), as its <name>/<name>.map lists them.
# GLOBAL: tests/plugins.cmake links the same imported targets.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(NIC_IBVERBS QUIET IMPORTED_TARGET GLOBAL libibverbs)
  pkg_check_modules(NIC_DPDK QUIET IMPORTED_TARGET GLOBAL libdpdk)
endif()

function(nic_add_backend_plugin name)
  set(target nicmalloc-${name})
  add_library(${target} MODULE ${ARGN} ${CMAKE_CURRENT_LIST_DIR}/cache/plugin_services.c)
  set_target_properties(${target} PROPERTIES
    PREFIX lib OUTPUT_NAME nicmalloc-${name}
    LIBRARY_OUTPUT_DIRECTORY $<TARGET_FILE_DIR:nicmalloc>
    C_VISIBILITY_PRESET hidden)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/${name} ${CMAKE_CURRENT_LIST_DIR}/cache
    ${PROJECT_SOURCE_DIR}/alloc/base ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${target} PRIVATE Threads::Threads)
  # Unresolved symbols would only show up at dlopen time in someone else's program.
  target_link_options(${target} PRIVATE -Wl,--no-undefined -Wl,-z,now
    -Wl,--version-script=${CMAKE_CURRENT_LIST_DIR}/${name}/${name}.map)
  set_target_properties(${target} PROPERTIES
    LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/${name}/${name}.map)
  install(TARGETS ${target} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  # A layer above the registration cache, whose headers alone it uses (tests/layers checks it).
  file(APPEND ${PROJECT_BINARY_DIR}/layers.txt
    "${name} regcache/${name} ${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/${target}.dir below:cache\n")
endfunction()

if(NIC_IBVERBS_FOUND)
  nic_add_backend_plugin(verbs ${CMAKE_CURRENT_LIST_DIR}/verbs/verbs.c
    ${CMAKE_CURRENT_LIST_DIR}/verbs/verbs_rx.c)
  target_link_libraries(nicmalloc-verbs PRIVATE PkgConfig::NIC_IBVERBS)
else()
  message(STATUS "nicmalloc: rdma-core (libibverbs) not found: the verbs backend is not built")
endif()

if(NIC_DPDK_FOUND)
  nic_add_backend_plugin(dpdk ${CMAKE_CURRENT_LIST_DIR}/dpdk/dpdk.c
    ${CMAKE_CURRENT_LIST_DIR}/dpdk/dpdk_mbuf.c ${CMAKE_CURRENT_LIST_DIR}/dpdk/dpdk_rx.c
    ${CMAKE_CURRENT_LIST_DIR}/dpdk/dpdk_areas.c ${CMAKE_CURRENT_LIST_DIR}/dpdk/dpdk_dma.c
    ${CMAKE_CURRENT_LIST_DIR}/dpdk/dpdk_ports.c)
  # rte_dev_dma_map and rte_dev_dma_unmap are experimental in 22.11.
  target_compile_definitions(nicmalloc-dpdk PRIVATE ALLOW_EXPERIMENTAL_API)
  target_link_libraries(nicmalloc-dpdk PRIVATE PkgConfig::NIC_DPDK)
else()
  message(STATUS "nicmalloc: DPDK (libdpdk) not found: the dpdk backend is not built")
endif()
