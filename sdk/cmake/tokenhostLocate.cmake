# Shared by tokenhostConfig.cmake and tokenhostConfigVersion.cmake: where the SDK's headers are (an
# installed or unpacked SDK: PREFIX/include beside PREFIX/lib/cmake/tokenhost; the source tree:
# sdk/include beside sdk/cmake) and the ABI version they declare, read from th_common.h, the one place
# it is written.
if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/../include/tokenhost/th_common.h")
  get_filename_component(_tokenhost_include "${CMAKE_CURRENT_LIST_DIR}/../include" ABSOLUTE)
else()
  get_filename_component(_tokenhost_include "${CMAKE_CURRENT_LIST_DIR}/../../../include" ABSOLUTE)
endif()
file(STRINGS "${_tokenhost_include}/tokenhost/th_common.h" _tokenhost_abi REGEX "^#define TH_ABI_VERSION_(MAJOR|MINOR) [0-9]+$")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*" "\\1" _tokenhost_abi_major "${_tokenhost_abi}")
string(REGEX REPLACE ".*MINOR ([0-9]+).*" "\\1" _tokenhost_abi_minor "${_tokenhost_abi}")
set(_tokenhost_abi_version "${_tokenhost_abi_major}.${_tokenhost_abi_minor}")
