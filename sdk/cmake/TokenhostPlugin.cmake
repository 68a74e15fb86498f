# tokenhost_add_plugin(<target> SOURCES <files>... [MANIFEST <plugin.toml>] [LIBRARIES <libs>...]
#                      [OUTPUT_DIRECTORY <dir>])
#
# Builds a tokenhost plugin: a MODULE library named <target>.so with hidden visibility, linked with
# -z defs (an unresolved symbol fails the link, not the load), -fno-gnu-unique and a version script
# exporting only the entry symbol (so that the library really unloads). With MANIFEST, plugin.toml is copied beside the library, where the host looks
# for it. Needs the target tokenhost::sdk (find_package(tokenhost) or the tokenhost source tree).
function(tokenhost_add_plugin target)
  cmake_parse_arguments(P "" "MANIFEST;OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT P_SOURCES)
    message(FATAL_ERROR "tokenhost_add_plugin(${target}): SOURCES is required")
  endif()
  add_library(${target} MODULE ${P_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if("CXX" IN_LIST languages)
    target_compile_features(${target} PRIVATE cxx_std_17)  # plugin.hpp, the C++ helper, needs C++17
  endif()
  target_link_libraries(${target} PRIVATE tokenhost::sdk ${P_LIBRARIES})
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANG_AND_ID:CXX,GNU>:-fno-gnu-unique>)
  # Export the entry symbol alone. Hidden visibility does not hide instantiated std:: templates; if
  # they stay exported, libstdc++ may bind to the plugin's copies and glibc then never unloads it.
  set(version_script ${CMAKE_CURRENT_BINARY_DIR}/${target}.exports)
  file(WRITE ${version_script} "{ global: tokenhost_plugin_entry; local: *; };\n")
  target_link_options(${target} PRIVATE -Wl,-z,defs -Wl,--version-script=${version_script})
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS ${version_script})
  if(P_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIRECTORY})
  endif()
  if(P_MANIFEST)
    get_filename_component(manifest "${P_MANIFEST}" ABSOLUTE)
    add_custom_command(TARGET ${target} POST_BUILD
      COMMAND ${CMAKE_COMMAND} -E copy_if_different ${manifest} $<TARGET_FILE_DIR:${target}>/plugin.toml
      VERBATIM)
  endif()
endfunction()
