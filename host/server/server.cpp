#include "server/server.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include <spdlog/spdlog.h>

#include "actors/engine.hpp"
#include "actors/registry.hpp"
#include "actors/router.hpp"
#include "actors/swap_latency.hpp"
#include "actors/worker.hpp"
#include "model/quant.hpp"
#include "runtime/draft_sessions.hpp"
#include "runtime/synthetic_model.hpp"
#include "model/tokenizer.hpp"
#include "plugin/kind.hpp"
#include "util/text.hpp"

namespace tokenhost {
namespace {

DeviceInfo resolve_device(const std::string& name) {
  for (const auto& d : devices()) {
    if (name == "cpu" && d.kind == TH_DEVICE_CPU) return d;
    if (d.kind == TH_DEVICE_CUDA && name == "cuda:" + std::to_string(d.index)) return d;
  }
  std::string why = cuda_unavailable_reason();
  throw PluginError("device '" + name + "' is not present on this machine" + (why.empty() ? "" : " (" + why + ")"));
}

// The sliding window decl asks of an engine whose kvcache instance is kv (off without one): the
// kvcache must release middle blocks (seq_drop_blocks, ABI 1.6) and its pool hold a whole window.
// Throws PluginError saying what does not fit, before any actor of the engine starts.
SlidingWindow sliding_window_of(const EngineDecl& decl, PluginInstance& kv, uint32_t context_len) {
  if (decl.sliding_window == 0) return {};
  const std::string engine = "engine '" + decl.name + "': ";
  if (kv.fn(&th_kvcache_vtable::seq_drop_blocks) == nullptr)
    throw PluginError(engine + "sliding_window needs a kvcache plugin with seq_drop_blocks (ABI 1.6) to release the window's oldest "
                      "blocks; " + kv.id() + " (built against ABI 1." + std::to_string(kv.library().abi_minor()) + ") has none");
  const th_kv_layout* layout = nullptr;
  th_error err;
  if (kv.call(&th_kvcache_vtable::get_layout, "get_layout", kv.handle(), &layout, &err) != TH_OK || layout == nullptr)
    throw PluginError(engine + kv.id() + " gives no KV layout: " + err.text());
  th_kv_stats stats{};
  stats.struct_size = sizeof stats;
  kv.call(&th_kvcache_vtable::stats, "stats", kv.handle(), &stats);
  try {
    return plan_sliding_window(decl.attention_sinks, decl.sliding_window, layout->block_size, stats.total_blocks, context_len);
  } catch (const std::invalid_argument& e) {
    throw PluginError(engine + e.what() + " (kvcache " + kv.id() + ")");
  }
}

}  // namespace

Server::Server(Deployment deployment) : deployment_(std::move(deployment)) {
  config_ = std::make_unique<caf::actor_system_config>();
  config_->set("logger.verbosity", caf::atom("quiet"));
  // CAF's idle workers poll their queues, sleeping 50 us between 500 attempts, before they block:
  // each wake-up preempts a compute thread for a while, and a step's threads wait for the slowest
  // (on 2 cores that cost 30-50% of single-stream decode speed). Block at once instead: an enqueue
  // from another thread wakes a blocked worker.
  config_->set("work-stealing.moderate-poll-attempts", size_t(0));
  config_->set("work-stealing.aggressive-poll-attempts", size_t(10));
  system_ = std::make_unique<caf::actor_system>(*config_);
  registry_ = spawn_registry(*system_, deployment_.catalog);
  refusals_ = &metrics_.family(metrics::Type::counter, "tokenhost_gateway_refusals_total",
                               "Requests the gateway refused before they started, by reason (api_key, "
                               "client_sequences, client_tokens, kv_demand)",
                               {"reason"});
  admission_ = std::make_unique<Admission>(deployment_.limits, refusals_);
  try {
    std::vector<RoutedEngine> routed;
    for (const auto& [name, decl] : deployment_.engines) {
      Engine e = build_engine(decl);
      routed.push_back({name, decl.model, e.actor, e.prefix_summary});
      engines_.emplace(name, std::move(e));
    }
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (const auto& [name, w] : weights_) {
      const ModelDecl& m = deployment_.models.at(name);
      ServedModel sm;
      sm.name = name;
      sm.context_len = m.spec.info.context_len;
      for (const auto& [engine, e] : engines_) {  // a window on every engine of the model, or none counts
        if (e.decl.model != name) continue;
        if (e.window_cap == 0) {
          sm.window_cap = 0;
          break;
        }
        sm.window_cap = std::max(sm.window_cap, e.window_cap);
      }
      sm.vocab_size = m.spec.info.vocab_size;
      sm.tokenizer = tokenizers_.count(name) ? tokenizers_.at(name).get() : nullptr;
      sm.chat_template = m.loaded ? m.loaded->chat_template : "";
      sm.created = now;
      served_.push_back(std::move(sm));
    }
    experiments_ = std::make_shared<experiments::ExperimentTable>(
        [this](const std::string& engine) {
          auto values = metrics_.values_where("tokenhost_plugin_", "engine", engine);
          values.merge(metrics_.values_where("tokenhost_step_", "engine", engine));  // the arm's load
          values.merge(metrics_.values_where("tokenhost_spec_", "engine", engine));    // its speculation
          values.merge(metrics_.values_where("tokenhost_prefix_", "engine", engine));  // and its prefix reuse
          return values;
        });
    for (const auto& spec : deployment_.experiments) start_experiment_checked(spec);
    label_arms();
    RouterInit r;
    r.router = make_instance(nullptr, "router", deployment_.router);
    r.engines = std::move(routed);
    r.metrics = &metrics_;
    r.experiments = experiments_;
    r.detokenize = [this](const std::string& model, const std::vector<int32_t>& tokens) {
      std::string text;
      if (const ServedModel* m = find_model(model))
        for (int32_t id : tokens) text += m->piece(id);
      return text;
    };
    router_ = spawn_router(*system_, std::move(r));
  } catch (...) {
    for (auto& [name, e] : engines_) {
      caf::anon_send_exit(e.actor, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(e.worker, caf::exit_reason::user_shutdown);
    }
    engines_.clear();
    caf::anon_send_exit(registry_, caf::exit_reason::user_shutdown);
    registry_ = nullptr;
    system_.reset();
    throw;
  }
}

Server::~Server() { shutdown(std::chrono::seconds(5)); }

std::shared_ptr<PluginInstance> Server::make_instance(const EngineDecl* engine, const std::string& slot,
                                                      const SlotDecl& decl, std::shared_ptr<PluginLibrary> library) {
  InstanceSpec spec;
  spec.engine = engine != nullptr ? engine->name : "router";
  spec.slot = slot;
  spec.model = engine != nullptr ? engine_model(deployment_, *engine) : deployment_.models.begin()->second.spec;
  spec.device = resolve_device(engine != nullptr ? engine->device : "cpu");
  spec.config = decl.config;
  spec.metrics = &metrics_;
  if (engine != nullptr && slot == "spec_decode" && draft_sessions_.count(engine->name))
    spec.drafts = draft_sessions_.at(engine->name);
  if (!library) {
    LoadReply loaded = load_library(decl.plugin);
    if (!loaded.library) throw PluginError(loaded.error);
    library = std::move(loaded.library);
  }
  return PluginInstance::create(std::move(library), spec);
}

Server::Engine Server::build_engine(const EngineDecl& decl, uint64_t kvcache_swap_requested_ns) {
  const std::string& name = decl.name;
  const ModelDecl& model = deployment_.models.at(decl.model);
  auto& weights = weights_[decl.model];
  if (!weights && model.loaded) {
    weights = model.loaded->weights;
    tokenizers_[decl.model] = std::make_shared<const Tokenizer>(model.loaded->tokenizer);
    spdlog::info("model {}: {} ({}), {:.1f} MiB mapped, shared by its engines", model.name, model.path,
                 model.spec.architecture, double(weights->bytes) / (1 << 20));
  } else if (!weights) {
    weights = make_synthetic_weights(model.spec, model.seed);
    spdlog::info("model {}: synthetic weights (seed {}), {:.1f} MiB, shared by its engines", model.name,
                 model.seed, double(weights->bytes) / (1 << 20));
  }
  // Every instance exists before any actor starts: a plugin that fails leaves nothing running.
  WorkerInit w;
  w.engine = name;
  int32_t device_index = 0;
  w.backend = find_backend(decl.device, &device_index);  // the manifest reader refused any it cannot run
  // Placed once per model and device, shared by the engines there (and by an engine rebuilt by a swap).
  auto& placed = placed_weights_[{decl.model, decl.device}];
  if (!placed) placed = w.backend->place_weights(weights, device_index, model.placement);
  w.weights = placed;
  w.metrics = &metrics_;
  w.attention = make_instance(&decl, "attention", decl.slots.at("attention"));
  w.kvcache = make_instance(&decl, "kvcache", decl.slots.at("kvcache"));
  const SlidingWindow window = sliding_window_of(decl, *w.kvcache, model.spec.info.context_len);
  if (decl.slots.count("moe")) w.moe = make_instance(&decl, "moe", decl.slots.at("moe"));
  // Draft sessions for the proposers of the engine: draft models on its device, each with a KV pool
  // made by its kvcache and attention plugins (the libraries loaded here; instances made on first use).
  {
    DraftSessionsInit d;
    d.engine = name;
    d.model = decl.model;
    d.backend = w.backend;
    d.kv_dtype = decl.kv_dtype;
    d.weights = [this, own = placed, own_name = decl.model, device = decl.device](const std::string& m) {
      return m == own_name ? own : draft_model_weights(m, device);
    };
    std::map<std::string, std::pair<std::shared_ptr<PluginLibrary>, SlotDecl>> slots;
    for (const char* slot : {"attention", "kvcache"}) {
      LoadReply loaded = load_library(decl.slots.at(slot).plugin);
      if (!loaded.library) throw PluginError(loaded.error);
      slots[slot] = {loaded.library, decl.slots.at(slot)};
    }
    d.make_instance = [this, slots, engine = name, device = decl.device](const std::string& slot, const ModelSpec& model) {
      InstanceSpec spec;
      spec.engine = engine;
      spec.slot = slot;
      spec.model = model;
      spec.device = resolve_device(device);
      spec.config = slots.at(slot).second.config;
      spec.metrics = &metrics_;
      return PluginInstance::create(slots.at(slot).first, spec);
    };
    draft_sessions_[name] = std::make_shared<DraftSessions>(std::move(d));
  }
  EngineInit e;
  e.name = name;
  e.model = decl.model;
  e.context_len = model.spec.info.context_len;
  e.vocab_size = model.spec.info.vocab_size;
  e.eos = tokenizers_.count(decl.model) ? tokenizers_.at(decl.model)->eos() : -1;
  e.max_step_tokens = decl.max_step_tokens;
  e.max_step_seqs = decl.max_step_seqs;
  e.max_draft = decl.max_draft;
  e.draft_policy = decl.draft_policy;
  e.scheduler = make_instance(&decl, "scheduler", decl.slots.at("scheduler"));
  if (decl.slots.count("spec_decode")) e.spec_decode = make_instance(&decl, "spec_decode", decl.slots.at("spec_decode"));
  if (w.kvcache->fn(&th_kvcache_vtable::seq_truncate) == nullptr)
    e.no_speculation = "its kvcache plugin " + w.kvcache->id() + " has no seq_truncate (ABI 1.4) to roll back rejected drafts";
  e.prefix_cache = caches_prefixes(*w.kvcache);
  e.window = window;
  e.metrics = &metrics_;
  e.drafts = draft_sessions_.at(name);
  e.kvcache_swap_requested_ns = kvcache_swap_requested_ns;
  e.worker = spawn_worker(*system_, std::move(w));
  Engine out;
  out.decl = decl;
  out.worker = e.worker;
  out.stopped = std::make_shared<std::atomic<bool>>(false);
  out.prefix_cache = e.prefix_cache;
  out.window_cap = window.cap;
  {
    // The pool's size, for admission control (the worker made its kvcache instance as it started).
    caf::scoped_actor self{*system_};
    self->request(e.worker, std::chrono::seconds(60), status_atom::value)
        .receive(
            [&](const KvState& kv) {
              out.kv_positions = uint64_t(kv.total_blocks) * kv.block_size;
              // Cache-aware routing: what its prefix cache holds, at most as many blocks as its pool.
              if (e.prefix_cache && kv.block_size > 0) out.prefix_summary = std::make_shared<PrefixSummary>(kv.block_size, kv.total_blocks);
            },
            [&](caf::error&) {});
  }
  e.prefix_summary = out.prefix_summary;
  out.actor = spawn_engine(*system_, std::move(e));
  out.actor->attach_functor([stopped = out.stopped] { *stopped = true; });
  spdlog::info("engine {} ready: model {} on {}, {} KV cache{}{}", name, decl.model, decl.device,
               quant::dtype_name(decl.kv_dtype), out.prefix_cache ? ", prefix caching" : "",
               window.on() ? ", attention sinks of " + std::to_string(window.sinks) + " positions and a sliding window up to " +
                                 std::to_string(window.cap) + " in all (released " + std::to_string(window.slide) + " or more at a time)"
                           : std::string());
  return out;
}

std::shared_ptr<const ModelWeights> Server::draft_model_weights(const std::string& name, const std::string& device) {
  auto decl = deployment_.models.find(name);
  if (decl == deployment_.models.end()) return nullptr;
  std::lock_guard lock(draft_weights_mutex_);
  auto& placed = draft_weights_[{name, device}];
  if (placed) return placed;
  const ModelDecl& model = decl->second;
  std::shared_ptr<const ModelWeights> weights;
  if (model.loaded) {
    weights = model.loaded->weights;
  } else {
    weights = make_synthetic_weights(model.spec, model.seed);
  }
  int32_t index = 0;
  const Backend* backend = find_backend(device, &index);
  placed = backend->place_weights(weights, index, model.placement);
  spdlog::info("model {}: placed on {} as a draft model, {:.1f} MiB", name, device, double(weights->bytes) / (1 << 20));
  return placed;
}

LoadReply Server::load_library(const std::string& id) {
  caf::scoped_actor self{*system_};
  LoadReply out;
  self->request(registry_, std::chrono::seconds(60), load_atom::value, id)
      .receive([&](LoadReply& r) { out = std::move(r); },
               [&](caf::error& e) { out.error = "plugin registry: " + system_->render(e); });
  return out;
}

std::string Server::register_plugin(const std::string& manifest_path) {
  if (!deployment_.server.plugins_from_anywhere) {
    // Only from the plugin folders: compared after resolving links and "..", before anything is read.
    std::error_code ec;
    const auto file = std::filesystem::weakly_canonical(std::filesystem::absolute(manifest_path, ec), ec);
    bool inside = false;
    for (const auto& dir : deployment_.catalog->search_paths()) {
      const auto folder = std::filesystem::weakly_canonical(dir, ec);
      auto rel = file.lexically_relative(folder);
      if (!rel.empty() && *rel.begin() != ".." && rel.is_relative()) inside = true;
    }
    if (!inside)
      throw AdminError(403, "'" + manifest_path + "' is outside the plugin folders (" +
                                join(deployment_.catalog->search_paths(), ", ") +
                                "): install the plugin there, add its folder to [server] plugin_paths, or set "
                                "[server] plugins_from_anywhere = true");
  }
  std::lock_guard lock(admin_mutex_);
  caf::scoped_actor self{*system_};
  LoadReply out;
  self->request(registry_, std::chrono::seconds(60), add_atom::value, manifest_path)
      .receive([&](LoadReply& r) { out = std::move(r); },
               [&](caf::error& e) { out.error = "plugin registry: " + system_->render(e); });
  if (!out.manifest) throw AdminError(out.not_found ? 404 : 400, out.error);
  spdlog::info("registered plugin {} {} from {}", out.manifest->id, out.manifest->version, manifest_path);
  return out.manifest->id;
}

std::vector<int32_t> ServedModel::encode(const std::string& text, bool add_bos, bool parse_special) const {
  if (tokenizer) return tokenizer->encode(text, add_bos, parse_special);
  std::vector<int32_t> bytes;  // synthetic models: one token per byte
  for (unsigned char c : text) bytes.push_back(c);
  return bytes;
}

std::string ServedModel::piece(int32_t token) const {
  if (tokenizer) return tokenizer->token_text(token);
  return std::string(1, token < 256 ? char(token) : '?');
}

const ServedModel* Server::find_model(const std::string& name) const {
  if (name.empty()) {
    std::string first;
    {
      std::lock_guard lock(engines_mutex_);
      if (engines_.empty()) return nullptr;
      first = engines_.begin()->second.decl.model;
    }
    return find_model(first);
  }
  for (const auto& m : served_)
    if (m.name == name) return &m;
  return nullptr;
}

const ServedModel& Server::default_model() const {
  static const ServedModel bytes;  // no engine left (stopped): one token per byte
  const ServedModel* m = find_model("");
  return m != nullptr ? *m : bytes;
}

std::vector<int32_t> Server::encode(const std::string& text) const { return default_model().encode(text, true, false); }

std::string Server::decode(const std::vector<int32_t>& tokens) const {
  std::string text;
  for (int32_t id : tokens) text += default_model().piece(id);
  return text;
}

std::variant<std::shared_ptr<AdmissionTicket>, AdmissionRefusal> Server::admit(AdmissionAsk ask) {
  {
    std::lock_guard lock(engines_mutex_);
    ask.pool_tokens = 0;
    for (const auto& [name, e] : engines_)
      if (e.decl.model == ask.model) ask.pool_tokens += e.kv_positions;
  }
  return admission_->admit(ask);
}

std::shared_ptr<TokenStream> Server::start(GenerateRequest request) {
  auto stream = request.stream ? request.stream : std::make_shared<TokenStream>();
  request.stream = stream;
  if (!accepting_) {
    stream->finish(GenerateResult::failed("", "the server is shutting down"));
    return stream;
  }
  // A request that names no model is for the default one, whose experiment then applies.
  if (request.model.empty())
    if (const ServedModel* m = find_model(""); m != nullptr && !experiments_->running_on_model(m->name).empty())
      request.model = m->name;
  ++in_flight_;
  // A short-lived actor asks the router and finishes the stream with the answer; the engine pushes
  // tokens to the stream meanwhile. The request and the stream are spawn arguments, not captures: an
  // actor spawned without arguments makes CAF 0.17 bind a reference to a null tuple (undefined
  // behaviour that UBSan stops the server for).
  auto ask = [this, router = router_](caf::event_based_actor* self, GenerateRequest request, std::shared_ptr<TokenStream> stream) {
    self->request(router, caf::infinite, generate_atom::value, std::move(request))
        .then(
            [this, stream](GenerateResult& r) {
              stream->finish(r);
              --in_flight_;
            },
            [this, stream, self](caf::error& e) {
              stream->finish(GenerateResult::failed("", "request failed: " + self->system().render(e)));
              --in_flight_;
            });
  };
  system_->spawn(ask, std::move(request), stream);
  return stream;
}

std::vector<engine_actor> Server::all_engine_actors() {
  std::lock_guard lock(engines_mutex_);
  std::vector<engine_actor> out;
  for (const auto& [name, e] : engines_) out.push_back(e.actor);
  for (const auto& e : retired_) out.push_back(e.actor);
  return out;
}

void Server::cancel(uint64_t request_id) {
  if (stopped_) return;
  for (const auto& actor : all_engine_actors()) caf::anon_send(actor, cancel_atom::value, request_id);
}

TokenStream::Update Server::wait(TokenStream& stream, size_t seen, std::chrono::milliseconds timeout) {
  // Wakes at least every 20 ms to notice a stopped server: once the actors are gone nothing will
  // finish the stream.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto u = stream.wait(seen, std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(20)));
    if (!u.tokens.empty() || u.result) return u;
    if (stopped_) {
      stream.finish(GenerateResult::failed("", "the server stopped before the request finished (shutting down)"));
      return stream.wait(seen, std::chrono::milliseconds(0));
    }
    if (left.count() <= 0) return u;
  }
}

GenerateResult Server::generate(GenerateRequest request, std::chrono::milliseconds timeout) {
  const uint64_t id = request.id;
  auto stream = start(std::move(request));
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t seen = 0;
  while (true) {
    auto u = wait(*stream, seen, std::chrono::milliseconds(100));
    seen += u.tokens.size();
    if (u.result) return *u.result;
    if (std::chrono::steady_clock::now() > deadline) {
      stream->cancel();
      cancel(id);
      return GenerateResult::failed("", "the request timed out after " + std::to_string(timeout.count()) + " ms");
    }
  }
}

template <class Actor, class... Ts>
StatusJson Server::ask_status_of(const Actor& target, Ts... message) {
  caf::scoped_actor self{*system_};
  StatusJson out{"null"};
  self->request(target, std::chrono::seconds(10), message...)
      .receive([&](StatusJson& s) { out = std::move(s); },
               [&](caf::error& e) { out.json = nlohmann::json({{"error", system_->render(e)}}).dump(); });
  return out;
}

nlohmann::json Server::status() {
  std::vector<std::pair<Engine, bool>> all;  // (engine, retiring)
  {
    std::lock_guard lock(engines_mutex_);
    prune_retired();
    for (const auto& [name, e] : engines_) all.emplace_back(e, false);
    for (const auto& e : retired_) all.emplace_back(e, true);
  }
  nlohmann::json engines = nlohmann::json::array();
  nlohmann::json retiring = nlohmann::json::array();
  for (const auto& [e, old] : all) {
    auto j = nlohmann::json::parse(ask_status_of(e.actor, status_atom::value, std::string()).json);
    j["device"] = e.decl.device;
    (old ? retiring : engines).push_back(j);
  }
  // The models' memory: the weights as loaded (mapped from the file, or made in memory) and the
  // packed copies the CPU backend placed beside them (backends/cpu/weight_packing.hpp), which an
  // operator may turn off per model.
  nlohmann::json models = nlohmann::json::array();
  for (const auto& [name, w] : weights_) {
    const ModelDecl& m = deployment_.models.at(name);
    size_t packed_bytes = 0;
    for (const auto& [where, placed] : placed_weights_)
      if (where.first == name) packed_bytes += placed->packed_bytes;
    models.push_back({{"name", name},
                      {"source", m.source},
                      {"path", m.path.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.path)},
                      {"weight_dtype", quant::dtype_name(w->spec.info.weight_dtype)},
                      {"weights_bytes", w->bytes},
                      {"packed_bytes", packed_bytes}});
  }
  return {{"engines", engines},
          {"retiring_engines", retiring},
          {"models", models},
          {"router", nlohmann::json::parse(ask_status_of(router_, status_atom::value, std::string()).json)},
          {"accepting", accepting_.load()},
          {"in_flight", in_flight_.load()},
          {"admission", admission_->status()},
          {"open_libraries", PluginLibrary::open_count()}};
}

nlohmann::json Server::plugins() { return nlohmann::json::parse(ask_status_of(registry_, list_atom::value).json); }

SwapResult Server::send_swap(const std::string& engine, SlotSwap swap) {
  caf::scoped_actor self{*system_};
  SwapResult out{false, "no reply"};
  auto on_error = [&](caf::error& e) { out = SwapResult{false, "swap failed: " + system_->render(e)}; };
  auto on_reply = [&](SwapResult& r) { out = std::move(r); };
  if (engine.empty()) {
    self->request(router_, std::chrono::seconds(60), swap_atom::value, std::move(swap)).receive(on_reply, on_error);
  } else {
    self->request(engines_.at(engine).actor, std::chrono::seconds(60), swap_atom::value, std::move(swap))
        .receive(on_reply, on_error);
  }
  return out;
}

std::string Server::set_slot(const std::string& engine, const std::string& slot, const std::string& plugin,
                             const toml::table& config) {
  const uint64_t requested_ns = steady_now_ns();
  std::lock_guard lock(admin_mutex_);
  if (!accepting_) throw AdminError(503, "the server is shutting down");
  const EngineDecl* decl = nullptr;
  const SlotInfo* info = find_slot(slot);
  if (info == nullptr) {
    std::vector<std::string> names;
    for (const auto& s : slot_table()) names.emplace_back(s.name);
    throw AdminError(404, "no slot '" + slot + "'" + suggestion(slot, names));
  }
  if (info->owner == SlotOwner::router) {
    if (!engine.empty()) throw AdminError(400, "the " + slot + " slot belongs to the server, not to engine '" + engine + "'");
  } else {
    auto it = engines_.find(engine);
    if (it == engines_.end()) {
      std::vector<std::string> names;
      for (const auto& [n, e] : engines_) names.push_back(n);
      throw AdminError(404, "no engine '" + engine + "'" + suggestion(engine, names));
    }
    decl = &it->second.decl;
    if (info->need == SlotNeed::moe_models && deployment_.models.at(decl->model).spec.info.n_experts == 0)
      throw AdminError(400, "engine '" + engine + "' serves a dense model: it has no " + slot + " slot");
  }
  // The registry re-reads the plugin's plugin.toml (a new version may be installed at the same path)
  // and opens its library; nothing changes until the new instance exists.
  LoadReply loaded = load_library(plugin);
  if (!loaded.manifest) throw AdminError(400, loaded.error);
  SlotDecl change;
  try {
    change = read_slot_change(*loaded.manifest, slot, config, "admin request");
  } catch (const ManifestError& e) {
    throw AdminError(400, e.message());
  }
  if (!loaded.library) throw AdminError(422, loaded.error);
  if (info->swap == SwapMode::new_engine) return replace_engine_for(engine, change, requested_ns);
  std::shared_ptr<PluginInstance> instance;
  try {
    instance = make_instance(decl, slot, change, std::move(loaded.library));
  } catch (const std::exception& e) {
    throw AdminError(422, e.what());
  }
  SwapResult r = send_swap(engine, SlotSwap{slot, std::move(instance), requested_ns});
  if (!r.ok) throw AdminError(409, r.message);
  if (decl != nullptr) engines_.at(engine).decl.slots[slot] = change;
  else deployment_.router = change;
  return r.message;
}

std::string Server::flush_prefix_cache(const std::string& engine) {
  worker_actor worker;
  std::shared_ptr<PrefixSummary> summary;
  {
    std::lock_guard lock(engines_mutex_);
    auto it = engines_.find(engine);
    if (it == engines_.end()) throw AdminError(404, "no engine '" + engine + "'");
    if (!it->second.prefix_cache)
      throw AdminError(409, "engine '" + engine + "': its kvcache plugin " + it->second.decl.slots.at("kvcache").plugin +
                                " keeps no prefix cache (seq_lookup, seq_publish and cache_flush, ABI 1.5)");
    worker = it->second.worker;
    summary = it->second.prefix_summary;
  }
  caf::scoped_actor self{*system_};
  std::optional<KvState> before, after;
  auto ask = [&](auto atom, std::optional<KvState>& out) {
    self->request(worker, std::chrono::seconds(60), atom).receive([&](const KvState& kv) { out = kv; },
                                                                  [&](caf::error& e) { throw AdminError(503, "engine '" + engine + "': " + system_->render(e)); });
  };
  ask(status_atom::value, before);
  ask(flush_atom::value, after);
  if (summary) summary->clear();  // the router no longer counts on what the engine held
  const uint32_t freed = before->cached_blocks - std::min(before->cached_blocks, after->cached_blocks);
  spdlog::info("engine {}: prefix cache flushed, {} unheld cached blocks freed", engine, freed);
  return "engine " + engine + ": prefix cache flushed (" + std::to_string(freed) + " cached blocks freed)";
}

std::string Server::unload_slot(const std::string& engine, const std::string& slot) {
  std::lock_guard lock(admin_mutex_);
  auto it = engines_.find(engine);
  if (it == engines_.end()) throw AdminError(404, "no engine '" + engine + "'");
  const SlotInfo* info = find_slot(slot);
  if (info == nullptr || info->owner == SlotOwner::router) throw AdminError(404, "engines have no slot '" + slot + "'");
  if (!info->unloadable) {
    throw AdminError(400, "slot '" + slot + "' of engine '" + engine + "' is required: swap its plugin instead of unloading it");
  }
  if (!it->second.decl.slots.count(slot)) throw AdminError(404, "engine '" + engine + "' has no plugin in slot '" + slot + "'");
  SwapResult r = send_swap(engine, SlotSwap{slot, nullptr});
  if (!r.ok) throw AdminError(409, r.message);
  it->second.decl.slots.erase(slot);
  return r.message;
}

// A kvcache swap changes the KV layout the running sequences' blocks are in: it cannot happen between
// two steps. A new engine with the new plugin starts beside the old one under the same name, new
// requests go to it, and the old one finishes the requests it has, then stops.
std::string Server::replace_engine_for(const std::string& engine, const SlotDecl& change, uint64_t requested_ns) {
  {
    // One drain at a time per engine: each would hold a whole KV pool and share the cores.
    std::lock_guard lock(engines_mutex_);
    prune_retired();
    for (const auto& e : retired_)
      if (e.decl.name == engine)
        throw AdminError(409, "engine '" + engine + "' is still draining the engine its previous kvcache swap replaced; "
                                  "swap again once that is done (GET /admin/engines lists it under retiring_engines)");
  }
  EngineDecl decl = engines_.at(engine).decl;
  std::string old = decl.slots.at("kvcache").plugin + " " + decl.slots.at("kvcache").manifest.version;
  decl.slots["kvcache"] = change;
  Engine fresh;
  try {
    fresh = build_engine(decl, requested_ns);
  } catch (const std::exception& e) {
    throw AdminError(422, std::string("the engine with the new kvcache plugin could not be built: ") + e.what());
  }
  SwapResult r = retire_engine(engine, &fresh);
  if (!r.ok) {
    caf::anon_send_exit(fresh.actor, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(fresh.worker, caf::exit_reason::user_shutdown);
    throw AdminError(409, r.message);
  }
  std::string what = "kvcache of " + engine + ": " + old + " -> " + change.plugin + " " + change.manifest.version +
                     " (a new engine; " + r.message + ")";
  spdlog::info("{}", what);
  return what;
}

SwapResult Server::retire_engine(const std::string& name, const Engine* successor) {
  caf::scoped_actor self{*system_};
  SwapResult r{false, "the router did not answer"};
  auto on_error = [&](caf::error& e) { r = SwapResult{false, "router: " + system_->render(e)}; };
  auto on_reply = [&](SwapResult& x) { r = std::move(x); };
  if (successor)
    self->request(router_, std::chrono::seconds(60), engine_replace_atom::value, RoutedEngine{name, successor->decl.model, successor->actor, successor->prefix_summary})
        .receive(on_reply, on_error);
  else
    self->request(router_, std::chrono::seconds(60), engine_remove_atom::value, name).receive(on_reply, on_error);
  if (!r.ok) return r;
  std::lock_guard lock(engines_mutex_);
  retired_.push_back(engines_.at(name));
  if (successor) engines_.at(name) = *successor;
  else engines_.erase(name);
  return r;
}

void Server::prune_retired() {
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(), [](const Engine& e) { return e.stopped->load(); }),
                 retired_.end());
}

std::string Server::add_engines(const std::string& toml_text, const std::string& source) {
  std::lock_guard lock(admin_mutex_);
  if (!accepting_) throw AdminError(503, "the server is shutting down");
  std::map<std::string, EngineDecl> decls;
  try {
    decls = read_engine_additions(deployment_, source, toml_text);
  } catch (const ManifestError& e) {
    throw AdminError(400, e.what());
  }
  for (const auto& [name, decl] : decls)
    if (!weights_.count(decl.model))
      throw AdminError(409, "engine '" + name + "': model '" + decl.model +
                                "' is declared but no engine served it at start, so it is not loaded; new engines can serve the loaded models only");
  std::vector<Engine> built;
  auto discard = [&] {
    for (auto& e : built) {
      caf::anon_send_exit(e.actor, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(e.worker, caf::exit_reason::user_shutdown);
    }
  };
  try {
    for (const auto& [name, decl] : decls) built.push_back(build_engine(decl));
  } catch (const std::exception& e) {
    discard();
    throw AdminError(422, std::string("engine not added: ") + e.what());
  }
  std::vector<std::string> names;
  caf::scoped_actor self{*system_};
  for (size_t i = 0; i < built.size(); ++i) {
    const Engine& e = built[i];
    SwapResult r{false, "the router did not answer"};
    self->request(router_, std::chrono::seconds(60), engine_add_atom::value, RoutedEngine{e.decl.name, e.decl.model, e.actor, e.prefix_summary})
        .receive([&](SwapResult& x) { r = std::move(x); }, [&](caf::error& err) { r.message = system_->render(err); });
    if (!r.ok) {
      // Those already routed stay: each is complete and serving. The rest are stopped.
      const std::string failed = e.decl.name;
      built.erase(built.begin(), built.begin() + i);
      discard();
      throw AdminError(409, "engine " + failed + " not added: " + r.message +
                                (names.empty() ? "" : " (added before it: " + join(names, ", ") + ")"));
    }
    names.push_back(e.decl.name);
    deployment_.engines[e.decl.name] = e.decl;
    std::lock_guard elock(engines_mutex_);
    engines_.emplace(e.decl.name, e);
  }
  std::string what = "added engine" + std::string(names.size() > 1 ? "s " : " ") + join(names, ", ");
  spdlog::info("admin: {}", what);
  return what;
}

std::string Server::remove_engine(const std::string& name, std::chrono::milliseconds grace) {
  std::unique_lock lock(admin_mutex_);
  auto it = engines_.find(name);
  if (it == engines_.end()) {
    std::vector<std::string> names;
    for (const auto& [n, e] : engines_) names.push_back(n);
    throw AdminError(404, "no engine '" + name + "'" + suggestion(name, names));
  }
  if (std::string x = experiments_->experiment_of_engine(name); !x.empty())
    throw AdminError(409, "engine '" + name + "' is an arm of running experiment '" + x + "'; stop the experiment first");
  const std::string model = it->second.decl.model;
  if (std::count_if(engines_.begin(), engines_.end(), [&](const auto& kv) { return kv.second.decl.model == model; }) == 1)
    throw AdminError(409, "engine '" + name + "' is the last engine serving model '" + model +
                              "'; add another engine for it first");
  Engine old = it->second;
  SwapResult r = retire_engine(name, nullptr);
  if (!r.ok) throw AdminError(409, r.message);
  deployment_.engines.erase(name);
  spdlog::info("admin: removing engine {}: {}", name, r.message);
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (!old.stopped->load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::string what = "removed engine " + name;
  if (!old.stopped->load()) {
    spdlog::warn("engine {}: requests still running after {} ms; ending them", name, grace.count());
    caf::anon_send_exit(old.actor, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(old.worker, caf::exit_reason::user_shutdown);
    while (!old.stopped->load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    what += " (requests still running after the grace period ended with an error)";
  }
  std::lock_guard elock(engines_mutex_);
  prune_retired();
  return what;
}

void Server::drain(std::chrono::milliseconds grace) {
  std::call_once(drain_once_, [&] {
    if (!system_) return;
    accepting_ = false;
    spdlog::info("shutting down: {} requests in flight", in_flight_.load());
    caf::anon_send(router_, drain_atom::value);
    auto deadline = std::chrono::steady_clock::now() + grace;
    while (in_flight_ > 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (in_flight_ > 0) spdlog::warn("{} requests still running after the grace period; stopping them", in_flight_.load());
    stopped_ = true;
  });
}

void Server::stop() {
  drain(std::chrono::milliseconds(0));
  std::call_once(stop_once_, [&] {
    if (!system_) return;
    {
      std::lock_guard lock(engines_mutex_);
      for (auto* e : [&] {
             std::vector<Engine*> v;
             for (auto& [name, x] : engines_) v.push_back(&x);
             for (auto& x : retired_) v.push_back(&x);
             return v;
           }()) {
        caf::anon_send_exit(e->actor, caf::exit_reason::user_shutdown);
        caf::anon_send_exit(e->worker, caf::exit_reason::user_shutdown);
      }
    }
    caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(registry_, caf::exit_reason::user_shutdown);
    {
      std::lock_guard lock(engines_mutex_);
      engines_.clear();
      retired_.clear();
    }
    router_ = nullptr;
    registry_ = nullptr;
    system_->await_all_actors_done();
    system_.reset();
    spdlog::info("shut down");
  });
}

void Server::shutdown(std::chrono::milliseconds grace) {
  drain(grace);
  stop();
}

}  // namespace tokenhost
