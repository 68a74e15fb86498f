#include "plugin/instance.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "plugin/kind.hpp"
#include "util/text.hpp"

namespace tokenhost {

namespace {
th_device device_abi(const DeviceInfo& d) {
  th_device out{};
  out.struct_size = sizeof(th_device);
  out.kind = d.kind;
  out.index = d.index;
  out.name = d.name.c_str();
  out.memory_bytes = d.memory_bytes;
  out.threads = d.threads;
  return out;
}
}  // namespace

std::vector<std::string> check_plugin(const PluginLibrary& lib, const InstanceSpec& spec) {
  std::vector<std::string> reasons;
  const auto& devices = lib.manifest().devices;
  std::string dev = device_kind_name(spec.device.kind);
  if (std::find(devices.begin(), devices.end(), dev) == devices.end()) {
    reasons.push_back("plugin.toml does not list device '" + dev + "'");
  }
  th_model_info model = spec.model.to_abi();
  // An 8-bit KV cache (ABI 1.6) is laid out and read through the layout's scale members, which
  // kvcache and attention plugins built before 1.6 never heard of (reserved then): not asked.
  const th_kind kind = lib.kind();
  if (model.kv_dtype == TH_DTYPE_Q8_0 && (kind == TH_KIND_KVCACHE || kind == TH_KIND_ATTENTION) && lib.abi_minor() < 6) {
    reasons.push_back("it was built against ABI 1." + std::to_string(lib.abi_minor()) +
                      "; a q8_0 KV cache needs kvcache and attention plugins built against 1.6 or later");
    return reasons;
  }
  th_device device = device_abi(spec.device);
  th_config config{spec.config};
  th_check_query query{sizeof(th_check_query), &model, &device, &config};
  th_error err;
  const PluginCallSite site{lib.id().c_str(), lib.version().c_str(), spec.slot.c_str(), spec.engine.c_str(), "check"};
  th_status s;
  try {
    s = guarded_plugin_call(site, [&] { return lib.head().check(&query, &err); });
  } catch (const PluginFault& e) {
    return {e.what()};
  }
  if (s != TH_OK) {
    if (err.messages.empty()) reasons.push_back("check() returned " + status_name(s) + " without a reason");
    for (auto& m : err.messages) reasons.push_back(std::move(m));
  }
  return reasons;
}

std::shared_ptr<PluginInstance> PluginInstance::create(std::shared_ptr<PluginLibrary> lib, const InstanceSpec& spec) {
  auto reasons = check_plugin(*lib, spec);
  if (!reasons.empty()) {
    throw PluginError("plugin " + lib->id() + " cannot serve engine '" + spec.engine + "' (model " + spec.model.name +
                      " on " + spec.device.name + "): " + join(reasons, "; "));
  }
  std::shared_ptr<PluginInstance> self(new PluginInstance());
  self->lib_ = std::move(lib);
  self->ctx_ = std::make_unique<th_host_ctx>();
  self->ctx_->plugin_id = self->lib_->id();
  self->ctx_->engine = spec.engine;
  self->ctx_->slot = spec.slot;
  self->ctx_->metrics = spec.metrics;
  self->ctx_->drafts = spec.drafts;
  self->ctx_->pool = spec.pool;
  self->ctx_->peers = spec.peers;
  self->config_.table = spec.config;
  self->device_ = spec.device;
  th_model_info model = spec.model.to_abi();
  th_device device = device_abi(spec.device);
  self->vocab_ = spec.vocab;
  if (self->vocab_) self->vocab_abi_ = self->vocab_->to_abi();
  th_create_args args{sizeof(th_create_args), self->ctx_.get(), &self->config_, &model, &device,
                      self->vocab_ ? &self->vocab_abi_ : nullptr};
  th_error err;
  th_status s;
  try {
    s = guarded_plugin_call(self->call_site("create"), [&] { return self->lib_->head().create(&args, &self->instance_, &err); });
  } catch (const PluginFault& e) {
    self->instance_ = nullptr;  // what create() made before it threw is lost: the plugin's leak
    throw PluginError(e.what());
  }
  if (s != TH_OK || self->instance_ == nullptr) {
    self->instance_ = nullptr;
    throw PluginError("plugin " + self->lib_->id() + ": create() failed with " + status_name(s) + ": " +
                      (err.messages.empty() ? std::string("(no message)") : err.text()));
  }
  spdlog::debug("created {} {} for engine {} slot {}", self->id(), self->version(), spec.engine, spec.slot);
  return self;
}

PluginInstance::~PluginInstance() {
  if (instance_ != nullptr) {
    try {
      guarded_plugin_call(call_site("destroy"), [&] { lib_->head().destroy(instance_); });
    } catch (const PluginFault&) {
      // Logged; a destructor throws nothing, and the library closes as it would have.
    }
    spdlog::debug("destroyed {} {} of engine {}", lib_->id(), lib_->version(), ctx_ ? ctx_->engine : "");
  }
  ctx_.reset();  // frees leaked allocations while the library is still open
}

}  // namespace tokenhost
