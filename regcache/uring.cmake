# The io_uring backend (fixed buffers + SEND_ZC), built into libnicmalloc. liburing is found
# with pkg-config (Debian: liburing-dev).
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBURING REQUIRED IMPORTED_TARGET liburing)
target_sources(nicmalloc_objects PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/uring/uring.c
  ${CMAKE_CURRENT_LIST_DIR}/uring/uring_buffers.c
  ${CMAKE_CURRENT_LIST_DIR}/uring/uring_files.c
  ${CMAKE_CURRENT_LIST_DIR}/uring/uring_reqs.c
  ${CMAKE_CURRENT_LIST_DIR}/uring/uring_send.c)
target_link_libraries(nicmalloc_objects PUBLIC PkgConfig::LIBURING)
# The shared library is built from the objects alone and does not inherit their link
# libraries; it links with --no-undefined, so it needs liburing itself.
if(TARGET nicmalloc)
  target_link_libraries(nicmalloc PRIVATE PkgConfig::LIBURING)
endif()
