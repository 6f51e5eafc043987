# Writes nicmalloc.pc when the project is installed (install(CODE) in CMakeLists.txt), for the
# prefix it is installed to: CMAKE_INSTALL_PREFIX here is cmake --install's --prefix when given.
# Every directory comes out absolute, so that pkg-config recognises its own system directories
# (/usr/include, /usr/lib/<triplet>) and leaves them out, and an absolute CMAKE_INSTALL_LIBDIR
# or CMAKE_INSTALL_INCLUDEDIR is taken as it is. Reads NIC_PC_OUT (the file to write),
# NIC_PC_LIBDIR and NIC_PC_INCLUDEDIR (CMAKE_INSTALL_LIBDIR and _INCLUDEDIR as configured) and
# NIC_PC_VERSION.
get_filename_component(NIC_PC_PREFIX "${CMAKE_INSTALL_PREFIX}" ABSOLUTE)
foreach(dir LIBDIR INCLUDEDIR)
  if(NOT IS_ABSOLUTE "${NIC_PC_${dir}}")
    set(NIC_PC_${dir} "\${prefix}/${NIC_PC_${dir}}")
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/nicmalloc.pc.in "${NIC_PC_OUT}" @ONLY)
