/* A preloaded library that brings in libstdc++, as libubsan or a C++ profiler does: the loader
 * then runs libstdc++'s initialisation, which allocates, before libmimalloc's own, so that
 * nicmalloc starts before mimalloc has started (test_guest.cc). It needs no code of its own. */
int nic_test_cxx_preload_marker;
