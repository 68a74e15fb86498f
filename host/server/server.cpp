#include "server/server.hpp"

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include <spdlog/spdlog.h>

#include "actors/registry.hpp"
#include "actors/router.hpp"
#include "actors/swap_latency.hpp"
#include "api/api_error.hpp"
#include "cluster/transport.hpp"
#include "manifest/manifest_export.hpp"
#include "model/tokenizer.hpp"
#include "server/remote_engine.hpp"
#include "runtime/generator.hpp"
#include "plugin/kind.hpp"
#include "util/folders.hpp"
#include "util/text.hpp"

namespace tokenhost {
Server::Server(Deployment deployment) : deployment_(std::move(deployment)) {
  config_ = std::make_unique<caf::actor_system_config>();
  config_->set("logger.verbosity", caf::atom("quiet"));
  // CAF's idle workers poll their queues, sleeping 50 us between 500 attempts, before they block:
  // each wake-up preempts a compute thread for a while, and a step's threads wait for the slowest
  // (on 2 cores that cost 30-50% of single-stream decode speed). Block at once instead: an enqueue
  // from another thread wakes a blocked worker.
  config_->set("work-stealing.moderate-poll-attempts", size_t(0));
  config_->set("work-stealing.aggressive-poll-attempts", size_t(10));
  if (deployment_.cluster.enabled) {
    identity_ = cluster::load_identity(deployment_.cluster);  // the files checked before CAF reads them
    cluster::configure(*config_, deployment_.cluster);
  }
  system_ = std::make_unique<caf::actor_system>(*config_);
  registry_ = spawn_registry(*system_, deployment_.catalog);
  factory_ = std::make_unique<EngineFactory>(*system_, deployment_, registry_, metrics_);
  try {
    std::vector<RoutedEngine> routed;
    for (const auto& [name, decl] : deployment_.engines) {
      auto e = factory_->build(decl);
      routed.push_back(e->routed());
      engines_->add(std::move(e));
    }
    // A head serves every model it declares: its workers' engines bring them (the tokenizer is here).
    if (!deployment_.cluster.workers.empty())
      for (const auto& [name, m] : deployment_.models) factory_->load_model(name);
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::vector<ServedModel> served;
    for (const std::string& name : factory_->loaded_models()) {
      const ModelDecl& m = deployment_.models.at(name);
      ServedModel sm;
      sm.name = name;
      sm.aliases = m.aliases;
      sm.context_len = m.spec.info.context_len;
      for (const auto& e : engines_->live()) {  // a window on every engine of the model, or none counts
        if (e->model() != name) continue;
        if (e->facts().window_cap == 0) {
          sm.window_cap = 0;
          break;
        }
        sm.window_cap = std::max(sm.window_cap, e->facts().window_cap);
      }
      sm.vocab_size = m.spec.info.vocab_size;
      sm.tokenizer = factory_->tokenizer(name);
      sm.chat_template = m.loaded ? m.loaded->chat_template : "";
      sm.created = now;
      served.push_back(std::move(sm));
    }
    add_groups(served);
    experiments_ = std::make_shared<experiments::ExperimentTable>(
        [this](const std::string& engine) {
          auto values = metrics_.values_where("tokenhost_plugin_", "engine", engine);
          values.merge(metrics_.values_where("tokenhost_step_", "engine", engine));  // the arm's load
          values.merge(metrics_.values_where("tokenhost_spec_", "engine", engine));    // its speculation
          values.merge(metrics_.values_where("tokenhost_prefix_", "engine", engine));  // its prefix reuse
          values.merge(metrics_.values_where("tokenhost_kv_connector_", "engine", engine));  // and its KV tiers
          return values;
        });
    for (const auto& spec : deployment_.experiments) start_experiment_checked(spec);
    label_arms();
    RouterInit r;
    r.router = factory_->make_instance(nullptr, slot_of(TH_KIND_ROUTER), deployment_.router);
    r.engines = std::move(routed);
    r.metrics = &metrics_;
    r.experiments = experiments_;
    r.breakers = breakers_;
    r.overload = overload_;
    for (const auto& [name, g] : deployment_.groups)
      for (const auto& m : g.members) r.groups[name].push_back({m.model, m.cost, m.quality});
    for (const auto& m : served)
      if (m.members.empty()) r.vocab_sizes[m.name] = m.vocab_size;
    r.detokenize = [served](const std::string& model, const std::vector<int32_t>& tokens) {
      std::string text;
      for (const auto& m : served)
        if (m.name == model)
          for (int32_t id : tokens) text += m.piece(id);
      return text;
    };
    router_ = spawn_router(*system_, std::move(r));
    GatewayInit g;
    g.system = system_.get();
    g.router = router_;
    g.engines = engines_;
    g.models = std::move(served);
    g.experiments = experiments_;
    g.limits = deployment_.limits;
    if (!deployment_.server.record_traffic.empty())
      g.recorder = std::make_shared<TrafficRecorder>(deployment_.server.record_traffic, deployment_.server.record_text);
    g.metrics = &metrics_;
    g.embed = [this](const std::string& model, const std::vector<std::vector<int32_t>>& inputs) { return embed(model, inputs); };
    gateway_ = std::make_unique<Gateway>(std::move(g));
    supervisor_ = std::make_unique<EngineSupervisor>(
        engines_, faults_, supervision_policy(deployment_.server),
        [this](const std::shared_ptr<EngineHandle>& down, const EngineDecl& decl) { return rebuild_down_engine(down, decl); },
        [this](const std::shared_ptr<EngineHandle>& hung, const std::string& why) {
          SwapResult r = ask_router(engine_hung_atom::value, hung->name(), why);
          if (!r.ok) spdlog::warn("router: engine {} hung: {}", hung->name(), r.message);
        },
        metrics_);
    if (deployment_.cluster.enabled) start_cluster();
  } catch (...) {
    stop_cluster();
    for (auto& e : engines_->take_all()) e->stop();
    caf::anon_send_exit(registry_, caf::exit_reason::user_shutdown);
    if (router_) caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
    registry_ = nullptr;
    router_ = nullptr;
    factory_.reset();
    system_.reset();
    throw;
  }
}

Server::~Server() { shutdown(std::chrono::seconds(5)); }

// Whether two served models read tokens alike: the same vocabulary (synthetic models: one token per
// byte, the same size) with the same texts and special tokens.
static bool same_tokenizer(const ServedModel& a, const ServedModel& b) {
  if (a.vocab_size != b.vocab_size || bool(a.tokenizer) != bool(b.tokenizer)) return false;
  if (!a.tokenizer) return true;
  return a.tokenizer->spec().tokens == b.tokenizer->spec().tokens && a.tokenizer->bos() == b.tokenizer->bos() &&
         a.tokenizer->eos() == b.tokenizer->eos();
}

std::vector<std::vector<float>> Server::embed(const std::string& model, const std::vector<std::vector<int32_t>>& inputs) {
  std::lock_guard lock(embed_mutex_);  // one embedder per model, one input at a time
  auto& embedder = embedders_[model];
  if (!embedder) {
    embedder = factory_->make_embedder(model);
    spdlog::info("embeddings: model {} ready (mean pooling of the last hidden state, on the CPU)", model);
  }
  std::vector<std::vector<float>> out;
  for (const auto& tokens : inputs) out.push_back(embedder->embed(tokens));
  return out;
}

void Server::add_groups(std::vector<ServedModel>& served) {
  for (const auto& [name, g] : deployment_.groups) {
    std::vector<const ServedModel*> members;
    for (const auto& m : g.members) {
      auto it = std::find_if(served.begin(), served.end(), [&](const ServedModel& s) { return s.name == m.model; });
      if (it == served.end())
        throw std::runtime_error("group '" + name + "': no engine serves its member model '" + m.model + "'");
      members.push_back(&*it);
    }
    for (const ServedModel* m : members)
      if (!same_tokenizer(*members[0], *m))
        throw std::runtime_error("group '" + name + "': models '" + members[0]->name + "' and '" + m->name +
                                 "' do not share a tokenizer; the members of a group must (a request's tokens go to any of them)");
    ServedModel sm = *members[0];
    sm.name = name;
    sm.aliases.clear();  // the first member's other names are not the group's
    for (const ServedModel* m : members) {
      sm.context_len = std::min(sm.context_len, m->context_len);
      sm.members.push_back(m->name);
    }
    // A window bounds a group's requests only when every member slides one (then the smallest holds).
    for (const ServedModel* m : members) sm.window_cap = m->window_cap == 0 ? 0 : std::min(sm.window_cap, m->window_cap);
    spdlog::info("group {}: serves {} through router {}", name, join(sm.members, ", "), deployment_.router.plugin);
    served.push_back(std::move(sm));
  }
  for (auto& m : served)  // a member is listed under its group's name
    for (const auto& [name, g] : deployment_.groups)
      if (std::any_of(g.members.begin(), g.members.end(), [&](const GroupMember& x) { return x.model == m.name; })) m.listed = false;
  std::sort(served.begin(), served.end(), [](const ServedModel& a, const ServedModel& b) { return a.name < b.name; });
}

SupervisionPolicy Server::supervision_policy(const ServerDecl& server) {
  SupervisionPolicy p;
  p.first_retry = std::chrono::milliseconds(server.restart_delay_ms);
  p.step_deadline = std::chrono::milliseconds(server.step_deadline_ms);
  return p;
}

std::string Server::register_plugin(const std::string& manifest_path) {
  if (!deployment_.server.plugins_from_anywhere) {
    // Only from the plugin folders: compared after resolving links and "..", before anything is read.
    if (!inside_any_folder(manifest_path, deployment_.catalog->search_paths()))
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

template <class... Ts>
SwapResult Server::ask_router(Ts... message) {
  caf::scoped_actor self{*system_};
  SwapResult r{false, "the router did not answer"};
  self->request(router_, std::chrono::seconds(60), message...)
      .receive([&](SwapResult& x) { r = std::move(x); }, [&](caf::error& e) { r = SwapResult{false, "router: " + system_->render(e)}; });
  return r;
}

void Server::no_such_engine(const std::string& name) const {
  throw AdminError(404, "no engine '" + name + "'" + suggestion(name, engines_->names()));
}

bool Server::accepting() const { return gateway_ && gateway_->accepting(); }

std::string Server::check_arm_choice(const std::string& model, const std::string& arm) const {
  return gateway_->check_arm_choice(model, arm);
}

std::string Server::prometheus_text() {
  for (const auto& e : engines_->live()) engine_up_.set({e->name()}, e->serving() ? 1 : 0);
  return metrics_.prometheus_text();
}

nlohmann::json Server::status() {
  nlohmann::json engines = nlohmann::json::array();
  nlohmann::json retiring = nlohmann::json::array();
  auto describe = [this](EngineHandle& e) {
    if (!e.serving()) {  // hung (asking would wait on the call that hangs) or down (nothing to ask)
      const bool hung = !e.stopped();
      nlohmann::json j{{"name", e.name()}, {"model", e.model()}, {"device", e.device()}, {"state", hung ? "hung" : "down"},
                       {"down_reason", hung ? e.hung() : e.stop_reason()}};
      // The supervisor says what it does about a down one.
      if (auto r = !hung && supervisor_ ? supervisor_->recovery(e.name()) : std::nullopt) {
        j["state"] = (*r)["state"];
        j["recovery"] = std::move(*r);
      }
      return j;
    }
    nlohmann::json j = e.status();
    j["device"] = e.device();
    if (const std::string partition = e.decl().partition; !partition.empty()) j["partition"] = partition;
    j["role"] = engine_role_name(e.decl().role);
    j["state"] = "serving";
    return j;
  };
  for (const auto& e : engines_->live()) engines.push_back(describe(*e));
  for (const auto& e : engines_->retiring()) retiring.push_back(describe(*e));
  StatusJson router{"null"};
  {
    caf::scoped_actor self{*system_};
    self->request(router_, std::chrono::seconds(10), status_atom::value, std::string())
        .receive([&](StatusJson& s) { router = std::move(s); },
                 [&](caf::error& e) { router.json = api::dump_json(nlohmann::json({{"error", system_->render(e)}})); });
  }
  return {{"engines", engines},
          {"retiring_engines", retiring},
          {"models", factory_->models_json()},
          {"partitions", factory_->partitions_json()},
          {slot_of(TH_KIND_ROUTER).name(), nlohmann::json::parse(router.json)},
          {"accepting", gateway_->accepting()},
          {"in_flight", gateway_->in_flight()},
          {"admission", gateway_->admission_status()},
          {"open_libraries", PluginLibrary::open_count()},
          {"cluster", cluster_status()}};
}

nlohmann::json Server::plugins() {
  caf::scoped_actor self{*system_};
  StatusJson out{"null"};
  self->request(registry_, std::chrono::seconds(10), list_atom::value)
      .receive([&](StatusJson& s) { out = std::move(s); },
               [&](caf::error& e) { out.json = api::dump_json(nlohmann::json({{"error", system_->render(e)}})); });
  nlohmann::json j = nlohmann::json::parse(out.json);
  if (j.is_object()) j["faults"] = faults_.json();  // the plugins whose faults stopped engines, and the quarantined
  return j;
}

std::string Server::export_manifest() {
  std::lock_guard lock(admin_mutex_);  // a consistent picture: no change half made
  RunningDeployment running;
  running.declared = &deployment_;
  for (const auto& e : engines_->live()) running.engines.push_back(e->decl());
  running.router = deployment_.router;
  running.experiments = experiments_->running_specs();
  running.breakers = breakers_->policy();
  running.overload = *overload_->policy();
  return write_manifest(running);
}

nlohmann::json Server::guards() const { return {{"breakers", breakers_->json()}, {"overload", overload_->json()}}; }

nlohmann::json Server::change_guards(const nlohmann::json& change) {
  std::lock_guard lock(admin_mutex_);
  if (!change.is_object()) throw AdminError(400, "a guards change is an object: {\"breakers\": {...}, \"overload\": {...}}");
  for (const auto& [key, value] : change.items())
    if (key != "breakers" && key != "overload") throw AdminError(400, "the guards have no '" + key + "' (breakers, overload)");
  routing::BreakerPolicy breakers = breakers_->policy();
  routing::OverloadPolicy overload = *overload_->policy();
  try {  // both checked before either changes
    if (change.contains("breakers")) breakers = routing::changed_breaker_policy(breakers, change["breakers"], "admin request");
    if (change.contains("overload")) overload = routing::changed_overload_policy(overload, change["overload"], "admin request");
  } catch (const std::invalid_argument& e) {
    throw AdminError(400, e.what());
  }
  if (change.contains("breakers")) {
    breakers_->set_policy(breakers);
    spdlog::info("admin: circuit breakers now {}", breakers.json().dump());
  }
  if (change.contains("overload")) {
    overload_->set_policy(overload);
    spdlog::info("admin: overload policy now {}", overload.json().dump());
  }
  return guards();
}

SlotDecl Server::slot_change(const std::string& plugin, const std::string& slot, const toml::table& config, LoadReply& loaded) {
  // The registry re-reads the plugin's plugin.toml (a new version may be installed at the same path)
  // and opens its library; nothing changes until the new instance exists.
  loaded = factory_->load_library(plugin);
  if (!loaded.manifest) throw AdminError(400, loaded.error);
  SlotDecl change;
  try {
    change = read_slot_change(*loaded.manifest, slot, config, "admin request");
  } catch (const ManifestError& e) {
    throw AdminError(400, e.message());
  }
  if (!loaded.library) throw AdminError(422, loaded.error);
  // The operator chose this plugin: a quarantine of it ends here (its rebuilt engines may take it again).
  if (faults_.release(change.plugin)) spdlog::warn("admin: plugin {} released from quarantine by a change of {}", change.plugin, slot);
  return change;
}

std::string Server::set_slot(const std::string& engine, const std::string& slot, const std::string& plugin,
                             const toml::table& config) {
  const uint64_t requested_ns = steady_now_ns();
  std::lock_guard lock(admin_mutex_);
  if (!accepting()) throw AdminError(503, "the server is shutting down");
  std::shared_ptr<EngineHandle> target;
  const std::optional<SlotId> id = slot_named(slot);
  if (!id) {
    std::vector<std::string> names;
    for (const auto& s : slot_table()) names.emplace_back(s.name);
    throw AdminError(404, "no slot '" + slot + "'" + suggestion(slot, names));
  }
  const SlotInfo* info = &id->info();
  if (info->stacks)
    throw AdminError(400, "the " + slot + " slot stacks layers: replace, insert or remove one by its position "
                          "(POST or DELETE /admin/engines/" + engine + "/slots/" + slot + "/layers/N, POST .../layers to append)");
  if (info->owner == SlotOwner::router) {
    if (!engine.empty()) throw AdminError(400, "the " + slot + " slot belongs to the server, not to engine '" + engine + "'");
  } else {
    target = engines_->find(engine);
    if (!target) no_such_engine(engine);
    if (auto* remote = dynamic_cast<RemoteEngine*>(target.get())) return change_remote_slot(*remote, slot, plugin, &config);
    if (info->need == SlotNeed::moe_models && deployment_.models.at(target->model()).spec.info.n_experts == 0)
      throw AdminError(400, "engine '" + engine + "' serves a dense model: it has no " + slot + " slot");
  }
  LoadReply loaded;
  const SlotDecl change = slot_change(plugin, slot, config, loaded);
  if (target && target->stopped()) {  // a down engine: rebuilt with the new plugin in place
    EngineDecl decl = target->decl();
    decl.slots[slot] = change;
    return repair_engine(target, decl, slot + " -> " + change.plugin + " " + change.manifest.version);
  }
  if (info->swap == SwapMode::new_engine) return replace_engine_for(engine, change, requested_ns);
  std::shared_ptr<PluginInstance> instance;
  try {
    const EngineDecl decl = target ? target->decl() : EngineDecl{};
    instance = factory_->make_instance(target ? &decl : nullptr, *id, change, std::move(loaded.library));
  } catch (const std::exception& e) {
    throw AdminError(422, e.what());
  }
  SlotSwap swap{*id, std::move(instance), requested_ns};
  SwapResult r = target ? target->swap(std::move(swap)) : ask_router(swap_atom::value, std::move(swap));
  if (!r.ok) throw AdminError(409, r.message);
  if (target) target->set_slot_decl(slot, &change);
  else deployment_.router = change;
  return r.message;
}

std::string Server::change_layer(const std::string& engine, const std::string& slot, SlotSwap::LayerOp op, uint32_t position,
                                 const std::string& plugin, const toml::table& config) {
  using Op = SlotSwap::LayerOp;
  const uint64_t requested_ns = steady_now_ns();
  std::lock_guard lock(admin_mutex_);
  if (!accepting()) throw AdminError(503, "the server is shutting down");
  const std::optional<SlotId> id = slot_named(slot);
  if (!id || !id->info().stacks) {
    std::vector<std::string> stacking;
    for (const auto& s : slot_table())
      if (s.stacks) stacking.emplace_back(s.name);
    throw AdminError(404, "no stacking slot '" + slot + "' (the slots that stack layers: " + join(stacking, ", ") + ")");
  }
  auto target = engines_->find(engine);
  if (!target) no_such_engine(engine);
  if (dynamic_cast<RemoteEngine*>(target.get()))
    throw AdminError(501, "engine '" + engine + "' runs on another node: change its " + slot + " layers through that node's admin API");
  EngineDecl decl = target->decl();
  std::vector<SlotDecl> layers = decl.stacks.count(slot) ? decl.stacks.at(slot) : std::vector<SlotDecl>{};
  if (op == Op::insert && position == kAppendLayer) position = uint32_t(layers.size());
  if (op == Op::insert ? position > layers.size() : position >= layers.size())
    throw AdminError(400, "engine '" + engine + "' has " + std::to_string(layers.size()) + " " + slot + " layer(s): position " +
                              std::to_string(position) + " is out of range (" +
                              (op == Op::insert ? "0 to " + std::to_string(layers.size()) : layers.empty() ? std::string("none") : "0 to " + std::to_string(layers.size() - 1)) +
                              ")");
  SlotDecl change;
  std::shared_ptr<PluginInstance> instance;
  if (op != Op::remove) {
    LoadReply loaded;
    change = slot_change(plugin, slot, config, loaded);
    if (!target->stopped()) {
      try {
        instance = factory_->make_instance(&decl, *id, change, std::move(loaded.library));
      } catch (const std::exception& e) {
        throw AdminError(422, e.what());
      }
    }
  }
  if (op == Op::replace) layers[position] = change;
  else if (op == Op::insert) layers.insert(layers.begin() + position, change);
  else layers.erase(layers.begin() + position);
  if (target->stopped()) {  // a down engine: rebuilt with the stack as changed
    if (layers.empty()) decl.stacks.erase(slot);
    else decl.stacks[slot] = layers;
    return repair_engine(target, decl, slot + " layer " + std::to_string(position) + " changed");
  }
  SlotSwap swap{*id, std::move(instance), requested_ns};
  swap.layer_op = op;
  swap.layer = position;
  SwapResult r = target->swap(std::move(swap));
  if (!r.ok) throw AdminError(409, r.message);
  target->set_stack_decl(slot, std::move(layers));
  return r.message;
}

std::string Server::flush_prefix_cache(const std::string& engine) {
  auto target = engines_->find(engine);
  if (!target) throw AdminError(404, "no engine '" + engine + "'");
  if (!target->facts().prefix_cache)
    throw AdminError(409, "engine '" + engine + "': its kvcache plugin " + target->decl().slots.at(slot_of(TH_KIND_KVCACHE).name()).plugin +
                              " keeps no prefix cache (seq_lookup, seq_publish and cache_flush, ABI 1.5)");
  std::pair<KvState, KvState> kv;
  try {
    kv = target->flush_prefix_cache();
  } catch (const std::runtime_error& e) {
    throw AdminError(503, "engine '" + engine + "': " + e.what());
  }
  if (target->facts().prefix_summary) target->facts().prefix_summary->clear();  // the router no longer counts on what the engine held
  const auto& [before, after] = kv;
  const uint32_t freed = before.cached_blocks - std::min(before.cached_blocks, after.cached_blocks);
  spdlog::info("engine {}: prefix cache flushed, {} unheld cached blocks freed", engine, freed);
  return "engine " + engine + ": prefix cache flushed (" + std::to_string(freed) + " cached blocks freed)";
}

std::string Server::unload_slot(const std::string& engine, const std::string& slot) {
  std::lock_guard lock(admin_mutex_);
  auto target = engines_->find(engine);
  if (!target) throw AdminError(404, "no engine '" + engine + "'");
  const std::optional<SlotId> id = slot_named(slot);
  if (!id || id->info().owner == SlotOwner::router) throw AdminError(404, "engines have no slot '" + slot + "'");
  if (!id->info().unloadable) {
    throw AdminError(400, "slot '" + slot + "' of engine '" + engine + "' is required: swap its plugin instead of unloading it");
  }
  if (id->info().stacks)
    throw AdminError(400, "the " + slot + " slot stacks layers: remove one by its position (DELETE /admin/engines/" + engine + "/slots/" +
                              slot + "/layers/N)");
  if (auto* remote = dynamic_cast<RemoteEngine*>(target.get())) return change_remote_slot(*remote, slot, "", nullptr);
  if (!target->decl().slots.count(slot)) throw AdminError(404, "engine '" + engine + "' has no plugin in slot '" + slot + "'");
  if (target->stopped()) {  // a down engine: rebuilt with the slot empty
    EngineDecl decl = target->decl();
    decl.slots.erase(slot);
    return repair_engine(target, decl, slot + " emptied");
  }
  SwapResult r = target->swap(SlotSwap{*id, nullptr});
  if (!r.ok) throw AdminError(409, r.message);
  target->set_slot_decl(slot, nullptr);
  return r.message;
}

// A kvcache swap changes the KV layout the running sequences' blocks are in: it cannot happen between
// two steps. A new engine with the new plugin starts beside the old one under the same name, new
// requests go to it, and the old one finishes the requests it has, then stops.
std::string Server::replace_engine_for(const std::string& engine, const SlotDecl& change, uint64_t requested_ns) {
  // One drain at a time per engine: each would hold a whole KV pool and share the cores.
  if (engines_->is_retiring(engine))
    throw AdminError(409, "engine '" + engine + "' is still draining the engine its previous kvcache swap replaced; "
                              "swap again once that is done (GET /admin/engines lists it under retiring_engines)");
  EngineDecl decl = engines_->find(engine)->decl();
  SlotDecl& kvcache = decl.slots.at(slot_of(TH_KIND_KVCACHE).name());
  const std::string old = kvcache.plugin + " " + kvcache.manifest.version;
  kvcache = change;
  std::shared_ptr<EngineHandle> fresh;
  try {
    fresh = factory_->build(decl, requested_ns);
  } catch (const std::exception& e) {
    throw AdminError(422, std::string("the engine with the new kvcache plugin could not be built: ") + e.what());
  }
  SwapResult r = retire_engine(engine, fresh);
  if (!r.ok) {
    fresh->stop();
    throw AdminError(409, r.message);
  }
  std::string what = "kvcache of " + engine + ": " + old + " -> " + change.plugin + " " + change.manifest.version +
                     " (a new engine; " + r.message + ")";
  spdlog::info("{}", what);
  return what;
}

SwapResult Server::retire_engine(const std::string& name, const std::shared_ptr<EngineHandle>& successor) {
  SwapResult r = successor ? ask_router(engine_replace_atom::value, successor->routed()) : ask_router(engine_remove_atom::value, name);
  if (r.ok) engines_->retire(name, successor);
  return r;
}

void Server::install_rebuilt(const std::shared_ptr<EngineHandle>& down, const EngineDecl& decl) {
  std::shared_ptr<EngineHandle> fresh = factory_->build(decl);  // throws PluginError, leaving nothing running
  fresh->inherit_previous_slots(*down);
  SwapResult r = ask_router(engine_add_atom::value, fresh->routed());
  if (!r.ok) {
    fresh->stop();
    throw std::runtime_error(r.message);
  }
  down->stop();  // its worker too, when only the engine actor stopped
  engines_->retire(down->name(), fresh);
  engines_->retiring();  // forgets the down one
  label_arms();
}

std::string Server::rebuild_down_engine(const std::shared_ptr<EngineHandle>& down, const EngineDecl& decl) {
  std::lock_guard lock(admin_mutex_);
  if (!accepting()) return "the server is shutting down";
  if (engines_->find(down->name()) != down) return "";  // repaired or removed by the admin API meanwhile
  try {
    install_rebuilt(down, decl);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::string Server::repair_engine(const std::shared_ptr<EngineHandle>& down, const EngineDecl& decl, const std::string& what) {
  try {
    install_rebuilt(down, decl);
  } catch (const std::exception& e) {
    throw AdminError(422, "engine '" + down->name() + "' is down (" + down->stop_reason() + ") and could not be rebuilt with " + what +
                              ": " + e.what());
  }
  std::string message = "engine " + down->name() + " was down (" + down->stop_reason() + "); rebuilt with " + what;
  spdlog::info("admin: {}", message);
  return message;
}

std::string Server::add_engines(const std::string& toml_text, const std::string& source) {
  std::lock_guard lock(admin_mutex_);
  if (!accepting()) throw AdminError(503, "the server is shutting down");
  std::map<std::string, EngineDecl> decls;
  try {
    decls = read_engine_additions(deployment_, source, toml_text);
  } catch (const ManifestError& e) {
    throw AdminError(400, e.what());
  }
  const auto loaded = factory_->loaded_models();
  for (const auto& [name, decl] : decls)
    if (std::find(loaded.begin(), loaded.end(), decl.model) == loaded.end())
      throw AdminError(409, "engine '" + name + "': model '" + decl.model +
                                "' is declared but no engine served it at start, so it is not loaded; new engines can serve the loaded models only");
  std::vector<std::shared_ptr<EngineHandle>> built;
  auto discard = [&] {
    for (auto& e : built) e->stop();
  };
  try {
    for (const auto& [name, decl] : decls) built.push_back(factory_->build(decl));
  } catch (const std::exception& e) {
    discard();
    throw AdminError(422, std::string("engine not added: ") + e.what());
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < built.size(); ++i) {
    const auto& e = built[i];
    SwapResult r = ask_router(engine_add_atom::value, e->routed());
    if (!r.ok) {
      // Those already routed stay: each is complete and serving. The rest are stopped.
      const std::string failed = e->name();
      built.erase(built.begin(), built.begin() + long(i));
      discard();
      throw AdminError(409, "engine " + failed + " not added: " + r.message +
                                (names.empty() ? "" : " (added before it: " + join(names, ", ") + ")"));
    }
    names.push_back(e->name());
    deployment_.engines[e->name()] = e->decl();
    engines_->add(e);
  }
  std::string what = "added engine" + std::string(names.size() > 1 ? "s " : " ") + join(names, ", ");
  spdlog::info("admin: {}", what);
  return what;
}

std::string Server::remove_engine(const std::string& name, std::chrono::milliseconds grace) {
  std::unique_lock lock(admin_mutex_);
  auto old = engines_->find(name);
  if (!old) no_such_engine(name);
  if (std::string x = experiments_->experiment_of_engine(name); !x.empty())
    throw AdminError(409, "engine '" + name + "' is an arm of running experiment '" + x + "'; stop the experiment first");
  const std::string model = old->model();
  if (engines_->engines_serving(model) == 1)
    throw AdminError(409, "engine '" + name + "' is the last engine serving model '" + model +
                              "'; add another engine for it first");
  if (old->stopped()) {  // down: the router has dropped it already, and it holds no request
    engines_->retire(name, nullptr);
    deployment_.engines.erase(name);
    engines_->retiring();  // forgets it
    spdlog::info("admin: removed engine {}, which was down ({})", name, old->stop_reason());
    return "removed engine " + name + " (it was down: " + old->stop_reason() + ")";
  }
  SwapResult r = retire_engine(name, nullptr);
  if (!r.ok) throw AdminError(409, r.message);
  deployment_.engines.erase(name);
  spdlog::info("admin: removing engine {}: {}", name, r.message);
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (!old->stopped() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::string what = "removed engine " + name;
  if (!old->stopped()) {
    spdlog::warn("engine {}: requests still running after {} ms; ending them", name, grace.count());
    old->stop();
    while (!old->stopped()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    what += " (requests still running after the grace period ended with an error)";
  }
  engines_->retiring();  // forgets it
  return what;
}

void Server::drain(std::chrono::milliseconds grace) {
  std::call_once(drain_once_, [&] {
    if (!system_ || !gateway_) return;
    if (supervisor_) supervisor_->stop();  // no engine is rebuilt from here on
    gateway_->drain(grace);
  });
}

void Server::stop() {
  drain(std::chrono::milliseconds(0));
  std::call_once(stop_once_, [&] {
    if (!system_) return;
    if (supervisor_) supervisor_->stop();
    stop_cluster();
    for (auto& e : engines_->take_all()) e->stop();
    caf::anon_send_exit(router_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(registry_, caf::exit_reason::user_shutdown);
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
