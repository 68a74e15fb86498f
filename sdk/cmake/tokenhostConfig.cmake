# Config file for building tokenhost plugins out of tree: find_package(tokenhost) gives the interface
# target tokenhost::sdk (the C ABI headers and the C++ helper) and the function tokenhost_add_plugin().
get_filename_component(_tokenhost_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET tokenhost::sdk)
  add_library(tokenhost::sdk INTERFACE IMPORTED)
  set_target_properties(tokenhost::sdk PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_tokenhost_prefix}/include")
endif()
include("${CMAKE_CURRENT_LIST_DIR}/TokenhostPlugin.cmake")
set(tokenhost_ABI_VERSION "1.2")  # TH_ABI_VERSION_MAJOR.MINOR of include/tokenhost/th_common.h
