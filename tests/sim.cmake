# The sim backend and the translation-cache model: internal units, so they link the objects
# (internal symbols are hidden in libnicmalloc.so), as test_config does.
foreach(suite test_sim_nic test_sim_dma_lifetime test_sim_lock_order test_tcache_model)
  add_executable(${suite} ${CMAKE_CURRENT_LIST_DIR}/regcache/${suite}.cc)
  target_link_libraries(${suite} PRIVATE ${NIC_RUNTIME_LAYERS} GTest::gtest GTest::gtest_main
    Threads::Threads)
  gtest_discover_tests(${suite} PROPERTIES TIMEOUT 300 DISCOVERY_TIMEOUT 60)
endforeach()
