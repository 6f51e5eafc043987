# One CMake target per runtime layer. A layer links only the layers it names as BELOW (and,
# through them, theirs): their folders are its include path, so an include of a higher layer's
# header does not compile. tests/layers/check_layers.py reads the list this writes
# (${PROJECT_BINARY_DIR}/layers.txt) and checks the include graph and the objects' symbol
# references against it.
set(NIC_RUNTIME_FLAGS -fvisibility=hidden -fno-builtin-malloc -fno-builtin-free
  -fno-builtin-calloc -fno-builtin-realloc -ftls-model=initial-exec -fno-plt)
file(WRITE ${PROJECT_BINARY_DIR}/layers.txt "")
set_property(GLOBAL PROPERTY NIC_RUNTIME_LAYERS "")

# nic_layer(<name> SOURCES <files...> [BELOW <layers...>] [LIBS <libraries...>])
# The layer's folder is the current source directory; its target is nic_<name>.
function(nic_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;BELOW;LIBS" ${ARGN})
  set(target nic_${name})
  add_library(${target} OBJECT ${L_SOURCES})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
  set(below "")
  foreach(b IN LISTS L_BELOW)
    list(APPEND below nic_${b})
  endforeach()
  target_link_libraries(${target} PUBLIC ${below} ${L_LIBS})
  target_compile_options(${target} PRIVATE ${NIC_RUNTIME_FLAGS})
  file(RELATIVE_PATH dir ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  file(APPEND ${PROJECT_BINARY_DIR}/layers.txt
    "${name} ${dir} ${PROJECT_BINARY_DIR}/${dir}/CMakeFiles/${target}.dir below:${L_BELOW}\n")
  set_property(GLOBAL APPEND PROPERTY NIC_RUNTIME_LAYERS ${target})
endfunction()
