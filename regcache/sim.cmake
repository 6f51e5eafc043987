# The sim backend (a software NIC) and the translation-cache model, built into the runtime. The
# model (tcache_model.c) depends on nothing else, so benchmarks may also compile it on its own.
target_sources(nicmalloc_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/sim/sim_nic.c
  ${CMAKE_CURRENT_LIST_DIR}/sim/sim_dma.c
  ${CMAKE_CURRENT_LIST_DIR}/sim/sim_delays.c
  ${CMAKE_CURRENT_LIST_DIR}/sim/sim_keep.c
)
