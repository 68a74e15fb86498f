# Config file for building tokenhost plugins out of tree: find_package(tokenhost 1.11) gives the
# interface target tokenhost::sdk (the C ABI headers and the C++ helpers), the function
# tokenhost_add_plugin() and tokenhost_ABI_VERSION ("1.11": the ABI the headers declare, which is also
# the package's version). Works from an installed or unpacked SDK and from the source tree's sdk/.
# -DTOKENHOST_ABI=1.N builds against the frozen C headers of the older minor 1.N instead
# (tokenhostLocate.cmake), and tokenhost_ABI_VERSION says 1.N.
include("${CMAKE_CURRENT_LIST_DIR}/tokenhostLocate.cmake")
if(_tokenhost_abi_error)
  message(FATAL_ERROR "${_tokenhost_abi_error}")
endif()
if(NOT TARGET tokenhost::sdk)
  add_library(tokenhost::sdk INTERFACE IMPORTED)
  # With TOKENHOST_ABI, the frozen C headers of that minor come first: <tokenhost/tokenhost.h> resolves
  # there, the C++ helpers (plugin.hpp, ...) in the current headers.
  set_target_properties(tokenhost::sdk PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_tokenhost_abi_include};${_tokenhost_include}")
endif()
include("${CMAKE_CURRENT_LIST_DIR}/TokenhostPlugin.cmake")
set(tokenhost_ABI_VERSION "${_tokenhost_abi_version}")
