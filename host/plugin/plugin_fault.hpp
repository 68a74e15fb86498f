// Every plugin call is a fault boundary. The contract forbids exceptions across it (th_common.h), but a
// plugin that breaks the rule must not take its actor down unseen: whatever escapes a call is caught
// where the host made it, logged once with the plugin, its version, slot, engine and call (as a fatal
// signal is by crash_attribution.hpp), and rethrown as PluginFault, which the call's site turns into
// the error of the requests the call concerned.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

#include "plugin/crash_attribution.hpp"

namespace tokenhost {

class PluginFault : public std::runtime_error {
 public:
  PluginFault(const std::string& message, const PluginCallSite& site)
      : std::runtime_error(message), plugin(site.plugin_id), version(site.version), slot(site.slot), call(site.call) {}
  std::string plugin;   // its id
  std::string version;  // its version
  std::string slot;     // the slot it was in
  std::string call;     // the vtable member, e.g. "propose"
};

// Logs what escaped the call at `site` (error) and throws PluginFault: "plugin ID VERSION (slot S,
// engine E) threw from CALL: WHAT".
[[noreturn]] void throw_plugin_fault(const PluginCallSite& site, std::exception_ptr escaped);

// Runs f() (the plugin call) with the thread marked as inside `site` (crash attribution), turning
// anything it throws into PluginFault.
template <class F>
decltype(auto) guarded_plugin_call(const PluginCallSite& site, F&& f) {
  PluginCallScope scope(site);
  try {
    return f();
  } catch (...) {
    throw_plugin_fault(site, std::current_exception());
  }
}

}  // namespace tokenhost
