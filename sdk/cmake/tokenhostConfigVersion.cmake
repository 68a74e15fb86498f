# find_package(tokenhost X.Y): the package's version is the plugin ABI of its headers. It is compatible
# when X is that ABI's major and X.Y is not newer than it (a plugin built against it loads into every
# host of that major from that minor on). A 0.x request is checked like any other.
include("${CMAKE_CURRENT_LIST_DIR}/tokenhostLocate.cmake")
set(PACKAGE_VERSION "${_tokenhost_abi_version}")
if(NOT DEFINED PACKAGE_FIND_VERSION OR "${PACKAGE_FIND_VERSION}" STREQUAL "")
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(NOT "${PACKAGE_FIND_VERSION_MAJOR}" STREQUAL "${_tokenhost_abi_major}")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
