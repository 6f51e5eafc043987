# The io_uring backend end to end over loopback TCP. It links the objects directly (its API is
# internal, hidden in the shared library). Included from tests/CMakeLists.txt.
if(NOT TARGET GTest::gtest)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
add_executable(test_uring_backend ${CMAKE_CURRENT_LIST_DIR}/test_uring_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/test_uring_stream.cc)
target_link_libraries(test_uring_backend PRIVATE nicmalloc_objects GTest::gtest GTest::gtest_main
  Threads::Threads)
# Every wait in the suite has its own deadline; TIMEOUT is the last resort.
gtest_discover_tests(test_uring_backend PROPERTIES TIMEOUT 120 DISCOVERY_TIMEOUT 60)
