# tokenhost_add_plugin's reading of plugin.toml's [plugin] id and version (TH_PLUGIN_ID and
# TH_PLUGIN_VERSION), run with cmake -P: the [plugin] table's keys only, basic and literal strings,
# spacing and comments around them, and a missing key failing the configure step with the file's name.
#   cmake -DSDK_CMAKE=<sdk/cmake/TokenhostPlugin.cmake> -DWORK=<scratch dir> -P plugin_manifest_values.cmake
include(${SDK_CMAKE})
file(MAKE_DIRECTORY ${WORK})

function(expect manifest_text key expected)
  file(WRITE ${WORK}/plugin.toml "${manifest_text}")
  _tokenhost_plugin_manifest_value(${WORK}/plugin.toml ${key} value)
  if(NOT value STREQUAL expected)
    message(FATAL_ERROR "${key}: expected '${expected}', read '${value}' from:\n${manifest_text}")
  endif()
endfunction()

expect("[plugin]\nid = \"router.my\"\nversion = \"1.2.3\"\n" id "router.my")
expect("[plugin]\nid = \"router.my\"\nversion = \"1.2.3\"\n" version "1.2.3")
# Another table's id before, a config table's after, a literal string, spacing and a comment.
set(mixed "[other]\nid = \"not.this\"\n\n[ plugin ]\n  id   =   'router.literal'   # the id\nversion=\"2.0.0-rc1\"\n[config.id]\nid = \"nor.this\"\n")
expect("${mixed}" id "router.literal")
expect("${mixed}" version "2.0.0-rc1")
# A key that merely starts with the one asked for is not it.
expect("[plugin]\nidentity = \"x\"\nid = \"router.real\"\nversion = \"1\"\n" id "router.real")

# No id in [plugin] (only in another table): the configure step fails naming the file and the key.
file(WRITE ${WORK}/missing.toml "[plugin]\nversion = \"1.0.0\"\n[config.x]\nid = \"router.x\"\n")
file(WRITE ${WORK}/missing.cmake "include(${SDK_CMAKE})\n_tokenhost_plugin_manifest_value(${WORK}/missing.toml id v)\n")
execute_process(COMMAND ${CMAKE_COMMAND} -P ${WORK}/missing.cmake RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(rc EQUAL 0)
  message(FATAL_ERROR "a plugin.toml without [plugin] id was accepted")
endif()
string(REGEX REPLACE "[ \n]+" " " err "${err}")  # cmake wraps its messages
string(FIND "${err}" "missing.toml: no id = \"...\" line in its [plugin] table" at)
if(at LESS 0)
  message(FATAL_ERROR "the error does not name the file and key:\n${err}")
endif()
message(STATUS "plugin.toml id and version: read as tokenhost_add_plugin defines them")
