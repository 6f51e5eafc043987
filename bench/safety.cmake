# Scatter-gather and safety costs (bench/sga_bench.cc): internal settings are switched at run
# time, so it links the objects rather than the shared library.
add_executable(sga_bench ${CMAKE_CURRENT_LIST_DIR}/sga_bench.cc)
target_link_libraries(sga_bench PRIVATE ${NIC_RUNTIME_LAYERS} benchmark::benchmark Threads::Threads)
