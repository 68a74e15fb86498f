#include "plugin/plugin_fault.hpp"

#include <spdlog/spdlog.h>

namespace tokenhost {

void throw_plugin_fault(const PluginCallSite& site, std::exception_ptr escaped) {
  std::string what = "a non-standard exception";
  try {
    std::rethrow_exception(escaped);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  const std::string message = std::string("plugin ") + site.plugin_id + " " + site.version + " (slot " + site.slot + ", engine " +
                              site.engine + ") threw from " + site.call + ": " + what;
  spdlog::error("{} (plugins must not throw across the ABI: the call's requests end with this error)", message);
  throw PluginFault(message, site);
}

}  // namespace tokenhost
