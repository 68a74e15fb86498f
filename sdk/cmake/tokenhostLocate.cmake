# Shared by tokenhostConfig.cmake and tokenhostConfigVersion.cmake: where the SDK's headers are (an
# installed or unpacked SDK: PREFIX/include beside PREFIX/lib/cmake/tokenhost; the source tree:
# sdk/include beside sdk/cmake) and the ABI version they declare, read from th_common.h, the one place
# it is written.
#
# TOKENHOST_ABI (a cache variable: -DTOKENHOST_ABI=1.2) selects the frozen C headers of an older minor
# of the same major, kept whole in the SDK (PREFIX/include/tokenhost-abi/MAJOR.MINOR; the source tree's
# sdk/abi/MAJOR.MINOR): a plugin built against them loads into every host from that minor on.
# _tokenhost_abi_include is then their folder, searched before the current headers (the C++ helpers
# stay the current ones), and the package's version is that minor.
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/../include/tokenhost/th_common.h")
  get_filename_component(_tokenhost_include "${CMAKE_CURRENT_LIST_DIR}/../include" ABSOLUTE)
else()
  get_filename_component(_tokenhost_include "${CMAKE_CURRENT_LIST_DIR}/../../../include" ABSOLUTE)
endif()
file(STRINGS "${_tokenhost_include}/tokenhost/th_common.h" _tokenhost_abi REGEX "^#define TH_ABI_VERSION_(MAJOR|MINOR) [0-9]+$")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*" "\\1" _tokenhost_abi_major "${_tokenhost_abi}")
string(REGEX REPLACE ".*MINOR ([0-9]+).*" "\\1" _tokenhost_abi_minor "${_tokenhost_abi}")
set(_tokenhost_abi_version "${_tokenhost_abi_major}.${_tokenhost_abi_minor}")

set(_tokenhost_abi_include "")
set(_tokenhost_abi_error "")
set(TOKENHOST_ABI "" CACHE STRING "Build against the frozen C headers of this older ABI minor (e.g. 1.2); empty: the current ones")
if(TOKENHOST_ABI AND NOT TOKENHOST_ABI STREQUAL _tokenhost_abi_version)
  set(_frozen_roots "${_tokenhost_include}/tokenhost-abi" "${CMAKE_CURRENT_LIST_DIR}/../abi")
  foreach(_root IN LISTS _frozen_roots)
    if(NOT _tokenhost_abi_include AND EXISTS "${_root}/${TOKENHOST_ABI}/tokenhost/th_common.h")
      get_filename_component(_tokenhost_abi_include "${_root}/${TOKENHOST_ABI}" ABSOLUTE)
      get_filename_component(_frozen_root "${_root}" ABSOLUTE)
    endif()
  endforeach()
  if(NOT _tokenhost_abi_include)
    set(_known "")
    foreach(_root IN LISTS _frozen_roots)
      file(GLOB _minors RELATIVE "${_root}" "${_root}/*")
      list(APPEND _known ${_minors})
    endforeach()
    list(REMOVE_DUPLICATES _known)
    list(SORT _known)
    string(REPLACE ";" ", " _known "${_known}")
    # Reported by tokenhostConfig.cmake: CMake does not show a version file's errors.
    string(CONCAT _tokenhost_abi_error "TOKENHOST_ABI=${TOKENHOST_ABI}: this SDK (ABI ${_tokenhost_abi_version}) has no frozen "
           "headers of that minor; it has ${_known} (${_tokenhost_abi_version}, the current one: leave TOKENHOST_ABI empty)")
  else()
    set(_tokenhost_abi_version "${TOKENHOST_ABI}")
    string(REGEX REPLACE "\\..*" "" _tokenhost_abi_major "${TOKENHOST_ABI}")
  endif()
endif()
