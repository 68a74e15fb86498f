# tokenhost_add_plugin(<target> SOURCES <files>... [MANIFEST <plugin.toml>] [LIBRARIES <libs>...]
#                      [OUTPUT_DIRECTORY <dir>])
#
# Builds a tokenhost plugin: a MODULE library named <target>.so with hidden visibility, linked with
# -z defs (an unresolved symbol fails the link, not the load), -fno-gnu-unique and a version script
# exporting only the entry symbol (so that the library really unloads). With MANIFEST, plugin.toml is
# copied beside the library (a build output that follows plugin.toml's edits), where the host looks
# for it, and its [plugin] id and version become the
# compile definitions TH_PLUGIN_ID and TH_PLUGIN_VERSION (string literals) for the descriptor:
#   static const th_plugin_descriptor d = {sizeof d, TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR,
#                                          TH_KIND_SCHEDULER, TH_PLUGIN_ID, TH_PLUGIN_VERSION, &vtable};
# so that they are written once, in plugin.toml (the host refuses a library whose descriptor disagrees
# with its plugin.toml). Editing plugin.toml re-runs the configure step. Needs the target tokenhost::sdk
# (find_package(tokenhost) or the tokenhost source tree).

# Reads key (id or version) of the [plugin] table of `manifest` into out: a basic ("...") or literal
# ('...') string on a line of its own, as plugin.toml writes them. Fails the configure step naming the
# file when the key is missing.
function(_tokenhost_plugin_manifest_value manifest key out)
  file(STRINGS "${manifest}" lines)
  set(table "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[ \t]*\\[([^]]*)\\]")
      string(STRIP "${CMAKE_MATCH_1}" table)
    elseif(table STREQUAL "plugin" AND line MATCHES "^[ \t]*${key}[ \t]*=[ \t]*(\"([^\"]*)\"|'([^']*)')")
      set(${out} "${CMAKE_MATCH_2}${CMAKE_MATCH_3}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "${manifest}: no ${key} = \"...\" line in its [plugin] table (tokenhost_add_plugin reads the plugin's ${key} from it)")
endfunction()

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
    _tokenhost_plugin_manifest_value("${manifest}" id plugin_id)
    _tokenhost_plugin_manifest_value("${manifest}" version plugin_version)
    target_compile_definitions(${target} PRIVATE TH_PLUGIN_ID="${plugin_id}" TH_PLUGIN_VERSION="${plugin_version}")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${manifest}")
    # The copy beside the library is a build output of its own, made from plugin.toml: editing
    # plugin.toml alone and building again updates it. (Single-configuration generators: the library's
    # folder is known here.)
    get_target_property(out_dir ${target} LIBRARY_OUTPUT_DIRECTORY)
    if(NOT out_dir)
      set(out_dir ${CMAKE_CURRENT_BINARY_DIR})
    endif()
    add_custom_command(OUTPUT ${out_dir}/plugin.toml
      COMMAND ${CMAKE_COMMAND} -E copy ${manifest} ${out_dir}/plugin.toml
      DEPENDS ${manifest}
      COMMENT "plugin.toml of ${target}"
      VERBATIM)
    add_custom_target(${target}_plugin_toml DEPENDS ${out_dir}/plugin.toml)
    add_dependencies(${target} ${target}_plugin_toml)
  endif()
endfunction()
