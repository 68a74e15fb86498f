#include "plugin/host_api.hpp"

#include <cstdlib>
#include <cstring>
#include <set>

#include <spdlog/spdlog.h>

#include "base/devices.hpp"
#include "base/compute_pool.hpp"
#include "plugin/grouped_matmul_rules.hpp"

std::string th_error::text() const {
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (i > 0) out += "; ";
    out += messages[i];
  }
  return out;
}

th_host_ctx::~th_host_ctx() {
  if (!draft_sessions.empty())
    spdlog::warn("plugin {} ({}/{}) left {} draft session(s) open; closed on destroy", plugin_id, engine, slot,
                 draft_sessions.size());
  for (auto& [handle, session] : draft_sessions) {
    drafts->close(session->id);
    tokenhost::forget_draft_handle(handle);
  }
  for (auto& [ptr, where] : allocations) {
    spdlog::warn("plugin {} ({}/{}) leaked {} bytes; freed on destroy", plugin_id, engine, slot, where.second);
    tokenhost::device_free(where.first, ptr);
  }
}

namespace tokenhost {
namespace {

// Every open session's handle: a handle is looked up here before it is read (a plugin may pass anything).
std::mutex g_draft_handles_mutex;
std::set<const th_draft_session*> g_draft_handles;

}  // namespace

void forget_draft_handle(const th_draft_session* handle) {
  std::lock_guard lock(g_draft_handles_mutex);
  g_draft_handles.erase(handle);
}

namespace {

void api_error_set(th_error* err, const char* message) {
  if (err == nullptr) return;
  err->messages.emplace_back(message != nullptr ? message : "(null message)");
}

void api_log(th_host_ctx* ctx, th_log_level level, const char* message) {
  static const spdlog::level::level_enum levels[] = {spdlog::level::trace, spdlog::level::debug,
                                                     spdlog::level::info, spdlog::level::warn,
                                                     spdlog::level::err};
  auto lvl = level >= 0 && level <= 4 ? levels[level] : spdlog::level::info;
  const char* text = message != nullptr ? message : "(null message)";
  if (ctx != nullptr) {
    spdlog::log(lvl, "[{} {}/{}] {}", ctx->plugin_id, ctx->engine, ctx->slot, text);
  } else {
    spdlog::log(lvl, "[plugin] {}", text);
  }
}

// Finds key (a plain key or a dotted path) in the config.
const toml::node* lookup(const th_config* config, const char* key) {
  if (config == nullptr || key == nullptr) return nullptr;
  if (const toml::node* n = config->table.get(key)) return n;
  auto view = config->table.at_path(std::string_view(key));
  return view.node();
}

th_status api_config_get_int(const th_config* config, const char* key, int64_t* out) {
  const toml::node* n = lookup(config, key);
  if (n == nullptr) return TH_ERR_NOT_FOUND;
  if (!n->is_integer()) return TH_ERR_INVALID_ARGUMENT;
  *out = n->as_integer()->get();
  return TH_OK;
}

th_status api_config_get_double(const th_config* config, const char* key, double* out) {
  const toml::node* n = lookup(config, key);
  if (n == nullptr) return TH_ERR_NOT_FOUND;
  if (n->is_integer()) *out = double(n->as_integer()->get());
  else if (n->is_floating_point()) *out = n->as_floating_point()->get();
  else return TH_ERR_INVALID_ARGUMENT;
  return TH_OK;
}

th_status api_config_get_bool(const th_config* config, const char* key, int32_t* out) {
  const toml::node* n = lookup(config, key);
  if (n == nullptr) return TH_ERR_NOT_FOUND;
  if (!n->is_boolean()) return TH_ERR_INVALID_ARGUMENT;
  *out = n->as_boolean()->get() ? 1 : 0;
  return TH_OK;
}

th_status api_config_get_string(const th_config* config, const char* key, char* buf, size_t buf_size,
                                size_t* needed) {
  const toml::node* n = lookup(config, key);
  if (n == nullptr) return TH_ERR_NOT_FOUND;
  if (!n->is_string()) return TH_ERR_INVALID_ARGUMENT;
  const std::string& s = n->as_string()->get();
  if (needed != nullptr) *needed = s.size() + 1;
  if (buf == nullptr || buf_size < s.size() + 1) return TH_ERR_RESOURCE_EXHAUSTED;
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return TH_OK;
}

th_status api_metric_create(th_host_ctx* ctx, const th_metric_desc* desc, th_metric** out, th_error* err) {
  if (out != nullptr) *out = nullptr;
  if (ctx == nullptr || desc == nullptr || out == nullptr || desc->name == nullptr) {
    api_error_set(err, "metric_create: ctx, desc, desc->name and out are required");
    return TH_ERR_INVALID_ARGUMENT;
  }
  if (ctx->metrics == nullptr) {
    api_error_set(err, "metric_create: this host context has no metrics registry");
    return TH_ERR_UNSUPPORTED;
  }
  metrics::Type type;
  switch (desc->type) {
    case TH_METRIC_COUNTER: type = metrics::Type::counter; break;
    case TH_METRIC_GAUGE: type = metrics::Type::gauge; break;
    case TH_METRIC_HISTOGRAM: type = metrics::Type::histogram; break;
    default:
      api_error_set(err, ("metric_create: unknown metric type " + std::to_string(desc->type)).c_str());
      return TH_ERR_INVALID_ARGUMENT;
  }
  // Every plugin series is labelled with the engine and plugin of its instance.
  std::vector<std::string> labels = {"engine", "plugin"};
  for (uint32_t i = 0; i < desc->n_labels; ++i) {
    const std::string name = desc->label_names[i] != nullptr ? desc->label_names[i] : "";
    // The exposition adds these to every engine series (the engine's A/B experiment and arm).
    if (name == "experiment" || name == "arm") {
      api_error_set(err, ("metric_create: label '" + name + "' is reserved: the host labels every engine series with its experiment and arm").c_str());
      return TH_ERR_INVALID_ARGUMENT;
    }
    labels.push_back(name);
  }
  std::vector<double> buckets;
  if (desc->buckets != nullptr) buckets.assign(desc->buckets, desc->buckets + desc->n_buckets);
  try {
    auto& family = ctx->metrics->family(type, std::string("tokenhost_plugin_") + desc->name,
                                        desc->help != nullptr ? desc->help : "", labels, buckets);
    ctx->metric_handles.push_back(std::make_unique<th_metric>(th_metric{&family, ctx}));
    *out = ctx->metric_handles.back().get();
    return TH_OK;
  } catch (const std::exception& e) {
    api_error_set(err, (std::string("metric_create: ") + e.what()).c_str());
    return TH_ERR_INVALID_ARGUMENT;
  }
}

// Records one value; a wrong use (a counter set, too few labels) is logged, never thrown to the plugin.
template <class F>
void record(th_metric* metric, const char* const* label_values, F&& apply) {
  if (metric == nullptr) return;
  size_t n = metric->family->label_names().size();
  std::vector<std::string> values = {metric->ctx->engine, metric->ctx->plugin_id};
  for (size_t i = 2; i < n; ++i) values.emplace_back(label_values != nullptr && label_values[i - 2] ? label_values[i - 2] : "");
  try {
    apply(*metric->family, values);
  } catch (const std::exception& e) {
    spdlog::warn("[{}] metric {}: {}", metric->ctx->plugin_id, metric->family->name(), e.what());
  }
}

void api_metric_add(th_metric* m, const char* const* labels, double delta) {
  record(m, labels, [&](metrics::Family& f, const std::vector<std::string>& v) { f.add(v, delta); });
}
void api_metric_set(th_metric* m, const char* const* labels, double value) {
  record(m, labels, [&](metrics::Family& f, const std::vector<std::string>& v) { f.set(v, value); });
}
void api_metric_observe(th_metric* m, const char* const* labels, double value) {
  record(m, labels, [&](metrics::Family& f, const std::vector<std::string>& v) { f.observe(v, value); });
}

th_status api_mem_alloc(th_host_ctx* ctx, th_device_kind device, int32_t device_index, size_t bytes,
                        size_t alignment, void** out, th_error* err) {
  if (out == nullptr) return TH_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  if (alignment == 0) alignment = 64;
  if ((alignment & (alignment - 1)) != 0) {
    api_error_set(err, ("mem_alloc: alignment " + std::to_string(alignment) + " is not a power of two").c_str());
    return TH_ERR_INVALID_ARGUMENT;
  }
  std::string why;
  th_status status = TH_OK;
  void* p = device_alloc(device, device_index, bytes, alignment, why, &status);
  if (p == nullptr) {
    api_error_set(err, ("mem_alloc: " + why).c_str());
    return status;
  }
  if (ctx != nullptr) {
    std::lock_guard lock(ctx->alloc_mutex);
    ctx->allocations[p] = {device, bytes};
    ctx->bytes_allocated += bytes;
  }
  *out = p;
  return TH_OK;
}

void api_mem_free(th_host_ctx* ctx, void* ptr) {
  if (ptr == nullptr) return;
  th_device_kind device = TH_DEVICE_CPU;
  if (ctx != nullptr) {
    std::lock_guard lock(ctx->alloc_mutex);
    auto it = ctx->allocations.find(ptr);
    if (it == ctx->allocations.end()) {
      spdlog::error("[{}] mem_free of a pointer it did not allocate; ignored", ctx->plugin_id);
      return;
    }
    device = it->second.first;
    ctx->bytes_allocated -= it->second.second;
    ctx->allocations.erase(it);
  }
  device_free(device, ptr);
}

th_status api_model_run(th_host_ctx*, const th_model_run_request*, th_model_run_result*, th_error* err) {
  api_error_set(err, "model_run: this host has no model runtime that can run another model yet");
  return TH_ERR_UNSUPPORTED;
}

// The pool matmul and the forward pass's elementwise math run on: the instance's engine's compute
// partition, else the calling thread's pool (the process-wide one unless a worker set its partition).
// The pool a plugin's parallel work runs on: the calling thread's where the host chose one (an engine's
// step, one of its expert partitions), else the instance's compute partition (a thread of the plugin's
// own), else the process-wide pool.
ComputePool& pool_of(th_host_ctx* ctx) {
  return ctx != nullptr && ctx->pool && !compute_pool_chosen() ? *ctx->pool : compute_pool();
}

void api_parallel_for(th_host_ctx* ctx, size_t n, size_t grain, uint32_t max_threads,
                      void (*fn)(void* arg, size_t begin, size_t end), void* arg) {
  if (fn == nullptr) return;
  pool_of(ctx).parallel_for(n, [fn, arg](size_t begin, size_t end) { fn(arg, begin, end); }, grain, max_threads);
}

uint32_t api_compute_threads(th_host_ctx* ctx) { return uint32_t(pool_of(ctx).threads()); }

// Draft sessions (ABI 1.5): checked here (the calling instance's own sessions), run by ctx->drafts.
th_status draft_refuse(th_error* err, th_status status, const std::string& why) {  // and peer_send's
  api_error_set(err, why.c_str());
  return status;
}

th_status api_draft_open(th_host_ctx* ctx, const th_draft_open_args* args, th_draft_session** out, th_error* err) {
  if (out != nullptr) *out = nullptr;
  if (ctx == nullptr || !ctx->drafts)
    return draft_refuse(err, TH_ERR_UNSUPPORTED, "draft_open: this host offers draft sessions to spec_decode instances of an engine only");
  if (args == nullptr || out == nullptr || args->struct_size < TH_SIZE_THROUGH(th_draft_open_args, n_layers))
    return draft_refuse(err, TH_ERR_INVALID_ARGUMENT, "draft_open: NULL or short arguments");
  uint64_t id = 0;
  std::string why;
  if (th_status s = ctx->drafts->open(*args, id, why)) return draft_refuse(err, s, "draft_open: " + why);
  auto session = std::make_unique<th_draft_session>(th_draft_session{ctx, id});
  *out = session.get();
  {
    std::lock_guard lock(g_draft_handles_mutex);
    g_draft_handles.insert(session.get());
  }
  ctx->draft_sessions.emplace(session.get(), std::move(session));
  return TH_OK;
}

bool draft_known(th_draft_session* session) {
  std::lock_guard lock(g_draft_handles_mutex);
  return g_draft_handles.count(session) > 0;
}

th_status api_draft_append(th_draft_session* session, const int32_t* tokens, uint32_t n, th_error* err) {
  if (!draft_known(session)) return draft_refuse(err, TH_ERR_INVALID_ARGUMENT, "draft_append: not an open draft session");
  if (n > 0 && tokens == nullptr) return draft_refuse(err, TH_ERR_INVALID_ARGUMENT, "draft_append: NULL tokens");
  std::string why;
  if (th_status s = session->ctx->drafts->append(session->id, tokens, n, why)) return draft_refuse(err, s, "draft_append: " + why);
  return TH_OK;
}

th_status api_draft_rollback(th_draft_session* session, uint32_t n, th_error* err) {
  if (!draft_known(session)) return draft_refuse(err, TH_ERR_INVALID_ARGUMENT, "draft_rollback: not an open draft session");
  std::string why;
  if (th_status s = session->ctx->drafts->rollback(session->id, n, why)) return draft_refuse(err, s, "draft_rollback: " + why);
  return TH_OK;
}

th_status api_draft_run(th_host_ctx* ctx, const th_draft_run_args* args, th_error* err) {
  if (ctx == nullptr || !ctx->drafts)
    return draft_refuse(err, TH_ERR_UNSUPPORTED, "draft_run: this host offers draft sessions to spec_decode instances of an engine only");
  if (args == nullptr || args->struct_size < TH_SIZE_THROUGH(th_draft_run_args, n_written))
    return draft_refuse(err, TH_ERR_INVALID_ARGUMENT, "draft_run: NULL or short arguments");
  if (args->n_sessions == 0) return TH_OK;
  if (args->sessions == nullptr || args->n_draft == nullptr || args->tokens == nullptr || args->n_written == nullptr)
    return draft_refuse(err, TH_ERR_INVALID_ARGUMENT, "draft_run: a NULL array");
  std::vector<uint64_t> ids;
  for (uint32_t k = 0; k < args->n_sessions; ++k) {
    th_draft_session* s = args->sessions[k];
    if (!draft_known(s) || s->ctx != ctx)
      return draft_refuse(err, TH_ERR_INVALID_ARGUMENT, "draft_run: sessions[" + std::to_string(k) + "] is not a draft session this instance has open");
    ids.push_back(s->id);
  }
  std::string why;
  if (th_status s = ctx->drafts->run(ids, *args, why)) return draft_refuse(err, s, "draft_run: " + why);
  return TH_OK;
}

void api_draft_close(th_draft_session* session) {
  if (!draft_known(session)) {
    if (session != nullptr) spdlog::error("draft_close of a handle that is not an open draft session; ignored");
    return;
  }
  th_host_ctx* ctx = session->ctx;
  ctx->drafts->close(session->id);
  forget_draft_handle(session);
  ctx->draft_sessions.erase(session);
}

// Messages between KV connectors (ABI 1.9): checked here, carried by ctx->peers.
th_status api_peer_send(th_host_ctx* ctx, const char* peer, const void* bytes, size_t n, th_error* err) {
  if (ctx == nullptr || !ctx->peers)
    return draft_refuse(err, TH_ERR_UNSUPPORTED, "peer_send: this host carries messages between kv_connector instances only");
  if (peer == nullptr || *peer == '\0') return draft_refuse(err, TH_ERR_INVALID_ARGUMENT, "peer_send: no peer engine named");
  if (n > TH_PEER_MESSAGE_MAX_BYTES)
    return draft_refuse(err, TH_ERR_INVALID_ARGUMENT,
                        "peer_send: " + std::to_string(n) + " bytes, over the " + std::to_string(TH_PEER_MESSAGE_MAX_BYTES) + " a message carries");
  if (n > 0 && bytes == nullptr) return draft_refuse(err, TH_ERR_INVALID_ARGUMENT, "peer_send: NULL bytes");
  std::string why;
  std::string copy = ctx->peers->take(n);
  copy.assign(static_cast<const char*>(bytes), n);
  if (th_status s = ctx->peers->send(ctx->engine, ctx->plugin_id, peer, std::move(copy), why)) return draft_refuse(err, s, "peer_send: " + why);
  return TH_OK;
}

// Grouped products (ABI 1.10): checked here, run by the weights' backend on pool_of(ctx) (an expert
// partition's pool for the calls plugin/expert_partitions.hpp makes).
th_status api_grouped_matmul(th_host_ctx* ctx, const th_grouped_matmul_args* args, th_error* err) {
  if (const std::string wrong = grouped_matmul_error(args); !wrong.empty())
    return draft_refuse(err, TH_ERR_INVALID_ARGUMENT, "grouped_matmul: " + wrong);
  if (args->row_begin[args->n_groups] == 0) return TH_OK;
  th_device_kind device = TH_DEVICE_CPU;
  for (size_t i = 0; i < size_t(args->n_groups) * args->n_products; ++i)
    if (args->weights[i].data != nullptr) {
      device = args->weights[i].device;
      break;
    }
  try {
    UseComputePool partition(&pool_of(ctx));
    std::string why;
    if (th_status s = device_grouped_matmul(device, *args, why)) return draft_refuse(err, s, "grouped_matmul: " + why);
    return TH_OK;
  } catch (const std::exception& e) {
    return draft_refuse(err, TH_ERR_INTERNAL, std::string("grouped_matmul: ") + e.what());
  }
}

const th_host_api kHostApi = {
    sizeof(th_host_api),   TH_ABI_VERSION_MAJOR,  TH_ABI_VERSION_MINOR,  TOKENHOST_VERSION,
    api_error_set,         api_log,               api_config_get_int,    api_config_get_double,
    api_config_get_bool,   api_config_get_string, api_metric_create,     api_metric_add,
    api_metric_set,        api_metric_observe,    api_mem_alloc,         api_mem_free,
    api_model_run,         api_parallel_for,      api_compute_threads,   api_draft_open,
    api_draft_append,      api_draft_rollback,    api_draft_run,         api_draft_close,
    api_peer_send,         api_grouped_matmul,
};

}  // namespace

const th_host_api* host_api() { return &kHostApi; }

std::string PeerPost::take(size_t n) {
  if (n >= 4096) {  // small messages (answers) need no memory kept for them
    std::lock_guard lock(mutex_);
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->capacity() >= n && it->capacity() <= 2 * n) {  // not a much larger one: it would hold memory idle
        std::string s = std::move(*it);
        kept_ -= s.capacity();
        free_.erase(it);
        s.clear();
        return s;
      }
  }
  std::string s;
  s.reserve(n);
  return s;
}

void PeerPost::recycle(std::string bytes) {
  if (bytes.capacity() < 4096) return;
  std::lock_guard lock(mutex_);
  if (kept_ + bytes.capacity() > kKeepBytes) return;  // freed
  kept_ += bytes.capacity();
  free_.push_back(std::move(bytes));
}

std::string status_name(th_status status) {
  switch (status) {
    case TH_OK: return "TH_OK";
    case TH_ERR_INVALID_ARGUMENT: return "TH_ERR_INVALID_ARGUMENT";
    case TH_ERR_UNSUPPORTED: return "TH_ERR_UNSUPPORTED";
    case TH_ERR_OUT_OF_MEMORY: return "TH_ERR_OUT_OF_MEMORY";
    case TH_ERR_RESOURCE_EXHAUSTED: return "TH_ERR_RESOURCE_EXHAUSTED";
    case TH_ERR_NOT_FOUND: return "TH_ERR_NOT_FOUND";
    case TH_ERR_INTERNAL: return "TH_ERR_INTERNAL";
    default: return "status " + std::to_string(status);
  }
}

}  // namespace tokenhost
