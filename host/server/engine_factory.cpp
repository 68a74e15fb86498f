#include "server/engine_factory.hpp"

#include "actors/kv_connectors.hpp"

#include "runtime/generator.hpp"

#include <thread>

#include <spdlog/spdlog.h>

#include "actors/engine.hpp"
#include "actors/worker.hpp"
#include "model/quant.hpp"
#include "model/tokenizer.hpp"
#include "speculation/draft_sessions.hpp"
#include "runtime/synthetic_model.hpp"

namespace tokenhost {
namespace {

// The device a manifest names, as found on this machine. Throws PluginError saying why not.
DeviceInfo resolve_device(const std::string& name) {
  std::string why;
  const auto ref = parse_device(name, &why);
  if (!ref) throw PluginError("device '" + name + "': " + why);
  if (const DeviceInfo* found = find_device(*ref)) return *found;
  why = ref->kind == TH_DEVICE_CUDA ? cuda_unavailable_reason() : "";
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

std::shared_ptr<ComputePool> EngineFactory::pool_of(const EngineDecl& decl) {
  return decl.partition.empty() ? nullptr : pool_named(decl.partition, decl.name);
}

std::shared_ptr<ComputePool> EngineFactory::pool_named(const std::string& partition, const std::string& engine) {
  std::lock_guard lock(pools_mutex_);
  partition_engines_[partition].insert(engine);
  auto& pool = pools_[partition];
  if (pool) return pool;
  const PartitionDecl& p = deployment_.partitions.at(partition);  // the manifest reader checked the name
  pool = std::make_shared<ComputePool>(p.threads, p.cores);
  size_t total = 0;
  for (const auto& [name, made] : pools_) total += made->threads();
  const size_t machine = std::max(1u, std::thread::hardware_concurrency());
  spdlog::info("compute partition {} made for engine {}", describe(p), engine);
  if (total > machine)
    spdlog::warn("compute partitions have {} threads in all on a machine of {} cores: they will take turns on the cores", total, machine);
  return pool;
}

nlohmann::json EngineFactory::partitions_json() const {
  std::lock_guard lock(pools_mutex_);
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, pool] : pools_) {
    const auto engines = partition_engines_.find(name);
    out[name] = {{"threads", pool->threads()},
                 {"cores", pool->cores()},
                 {"jobs", pool->jobs()},
                 {"engines", engines == partition_engines_.end() ? std::vector<std::string>{}
                                                                 : std::vector<std::string>(engines->second.begin(), engines->second.end())}};
  }
  return out;
}

std::shared_ptr<PluginInstance> EngineFactory::make_instance(const EngineDecl* engine, SlotId slot, const SlotDecl& decl,
                                                             std::shared_ptr<PluginLibrary> library) {
  InstanceSpec spec;
  spec.engine = engine != nullptr ? engine->name : slot.name();  // the router's instance is labelled by its slot
  spec.slot = slot.name();
  spec.model = engine != nullptr ? engine_model(deployment_, *engine) : deployment_.models.begin()->second.spec;
  spec.device = engine != nullptr ? resolve_device(engine->device) : devices().front();
  spec.config = decl.config;
  spec.metrics = &metrics_;
  if (engine != nullptr && (spec.pool = pool_of(*engine))) spec.device.threads = uint32_t(spec.pool->threads());
  if (engine != nullptr && slot == slot_of(TH_KIND_SPEC_DECODE) && draft_sessions_.count(engine->name))
    spec.drafts = draft_sessions_.at(engine->name);
  if (engine != nullptr && slot == slot_of(TH_KIND_KV_CONNECTOR)) spec.peers = peer_post_;
  if (engine != nullptr) {
    load_model(engine->model);
    std::lock_guard lock(models_mutex_);
    if (auto v = vocabs_.find(engine->model); v != vocabs_.end()) spec.vocab = v->second;
  }
  if (!library) {
    LoadReply loaded = load_library(decl.plugin);
    if (!loaded.library) throw PluginError(loaded.error);
    library = std::move(loaded.library);
  }
  return PluginInstance::create(std::move(library), spec);
}

std::shared_ptr<EngineHandle> EngineFactory::build(const EngineDecl& decl, uint64_t kvcache_swap_requested_ns) {
  const std::string& name = decl.name;
  const ModelDecl& model = deployment_.models.at(decl.model);
  // Every instance exists before any actor starts: a plugin that fails leaves nothing running.
  WorkerInit w;
  w.engine = name;
  int32_t device_index = 0;
  w.backend = find_backend(decl.device, &device_index);  // the manifest reader refused any it cannot run
  std::shared_ptr<const ModelWeights> placed;
  std::shared_ptr<const Tokenizer> tokenizer;
  load_model(decl.model);
  {
    std::lock_guard lock(models_mutex_);
    const auto& weights = weights_.at(decl.model);
    // Placed once per model and device, shared by the engines there (and by an engine rebuilt by a swap).
    auto& at = placed_weights_[{decl.model, decl.device}];
    if (!at) at = w.backend->place_weights(weights, device_index, model.placement);
    placed = at;
    w.model_identity = model_identity(*weights);  // KV connector keys: nothing crosses models
    if (auto t = tokenizers_.find(decl.model); t != tokenizers_.end()) tokenizer = t->second;
  }
  w.weights = placed;
  w.metrics = &metrics_;
  w.pool = pool_of(decl);
  w.post = peer_post_;
  // Each slot the declaration fills, by the actor that owns it (the manifest reader checked which a
  // model needs): the worker's first, then (after the draft sessions its proposer may use) the engine's.
  auto fill = [&](SlotOwner owner, SlotInstances& into) {
    for (SlotId slot : slots_owned_by(owner)) {
      if (auto it = decl.slots.find(slot.name()); it != decl.slots.end()) into.set(slot, make_instance(&decl, slot, it->second));
      if (auto it = decl.stacks.find(slot.name()); it != decl.stacks.end())  // a stack's layers, in order
        for (const SlotDecl& layer : it->second) into.stack(slot).push_back(make_instance(&decl, slot, layer));
    }
  };
  fill(SlotOwner::worker, w.plugins);
  if (!decl.experts.partitions.empty()) {  // expert parallelism: the moe plugin takes concurrent experts() calls from 1.10
    const PluginInstance& moe = *w.plugins.get(slot_of(TH_KIND_MOE));  // an MoE model's engine has one (manifest reader)
    if (moe.library().abi_minor() < 10)
      throw PluginError("engine " + name + ": expert_partitions need a moe plugin built against ABI 1.10 or later (" + moe.id() +
                        " is " + std::to_string(TH_ABI_VERSION_MAJOR) + "." + std::to_string(moe.library().abi_minor()) +
                        "): its experts() may not take the partitions' concurrent calls");
    for (const auto& partition : decl.experts.partitions) w.expert_pools.push_back(pool_named(partition, name));
    w.expert_partition_names = decl.experts.partitions;
    w.expert_slots = decl.experts.slots_per_partition(model.spec.info.n_experts);
    w.rebalance_steps = decl.experts.rebalance_steps;
  }
  const SlidingWindow window = sliding_window_of(decl, w.kvcache(), model.spec.info.context_len);
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
    std::map<SlotId, std::pair<std::shared_ptr<PluginLibrary>, SlotDecl>> slots;
    for (th_kind kind : {TH_KIND_ATTENTION, TH_KIND_KVCACHE}) {
      const SlotDecl& slot = decl.slots.at(slot_of(kind).name());
      LoadReply loaded = load_library(slot.plugin);
      if (!loaded.library) throw PluginError(loaded.error);
      slots[slot_of(kind)] = {loaded.library, slot};
    }
    d.make_instance = [this, slots, engine = name, device = decl.device, pool = w.pool](SlotId slot, const ModelSpec& model) {
      InstanceSpec spec;
      spec.engine = engine;
      spec.slot = slot.name();
      spec.model = model;
      spec.device = resolve_device(device);
      if ((spec.pool = pool)) spec.device.threads = uint32_t(pool->threads());
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
  e.eos = tokenizer ? tokenizer->eos() : -1;
  e.max_step_tokens = decl.max_step_tokens;
  e.max_step_seqs = decl.max_step_seqs;
  e.max_draft = decl.max_draft;
  e.draft_policy = decl.draft_policy;
  fill(SlotOwner::engine, e.plugins);
  if (w.kvcache().fn(&th_kvcache_vtable::seq_truncate) == nullptr)
    e.no_speculation = "its kvcache plugin " + w.kvcache().id() + " has no seq_truncate (ABI 1.4) to roll back rejected drafts";
  e.prefix_cache = caches_prefixes(w.kvcache());
  e.kv_connectors = !w.plugins.stack(slot_of(TH_KIND_KV_CONNECTOR)).empty();
  if (e.kv_connectors && (!e.prefix_cache || w.kvcache().fn(&th_kvcache_vtable::seq_truncate) == nullptr))
    spdlog::warn("engine {}: its kv_connector stack stays idle: its kvcache plugin {} has no prefix caching with seq_truncate "
                 "(kvcache.prefix has both)", name, w.kvcache().id());
  e.window = window;
  e.metrics = &metrics_;
  e.drafts = draft_sessions_.at(name);
  e.kvcache_swap_requested_ns = kvcache_swap_requested_ns;
  e.vitals = std::make_shared<EngineVitals>();
  auto vitals = e.vitals;
  e.worker = spawn_worker(system_, std::move(w));
  const worker_actor worker = e.worker;
  engine_actor actor;
  // From here the engine's actors run: a throw must stop them, or the actor system would wait for them
  // at shutdown for ever.
  try {
    EngineFacts facts;
    uint32_t kv_blocks = 0, kv_block_size = 0;
    facts.prefix_cache = e.prefix_cache;
    facts.window_cap = window.cap;
    {
      // The pool's size, for admission control (the worker made its kvcache instance as it started).
      caf::scoped_actor self{system_};
      self->request(e.worker, std::chrono::seconds(60), status_atom::value)
          .receive(
              [&](const KvState& kv) {
                facts.kv_positions = uint64_t(kv.total_blocks) * kv.block_size;
                kv_blocks = kv.total_blocks, kv_block_size = kv.block_size;
                e.kv = kv;
                // Cache-aware routing: what its prefix cache holds, at most as many blocks as its pool.
                if (e.prefix_cache && kv.block_size > 0) facts.prefix_summary = std::make_shared<PrefixSummary>(kv.block_size, kv.total_blocks);
              },
              [&](caf::error&) {});
    }
    e.prefix_summary = facts.prefix_summary;
    const bool prefix_cache = facts.prefix_cache;
    actor = spawn_engine(system_, std::move(e));
    // The pool's memory: K and V of every layer's KV heads per position, at the dtype's bytes per element
    // (a q8_0 block's scale shared by its 32 elements).
    const th_model_info& info = model.spec.info;
    const double kv_mib = double(kv_blocks) * kv_block_size * 2.0 * info.n_layers * double(info.n_kv_heads) * info.head_dim *
                          double(quant::block_bytes(decl.kv_dtype)) / double(quant::block_elems(decl.kv_dtype)) / (1 << 20);
    spdlog::info("engine {} ready: model {} on {}, {} KV cache of {} blocks of {} positions ({} positions, {:.1f} MiB){}{}", name,
                 decl.model, decl.device, quant::dtype_name(decl.kv_dtype), kv_blocks, kv_block_size,
                 uint64_t(kv_blocks) * kv_block_size, kv_mib, prefix_cache ? ", prefix caching" : "",
                 window.on() ? ", attention sinks of " + std::to_string(window.sinks) + " positions and a sliding window up to " +
                                   std::to_string(window.cap) + " in all (released " + std::to_string(window.slide) + " or more at a time)"
                             : std::string());
    return std::make_shared<LocalEngine>(system_, decl, std::move(facts), std::move(actor), worker, std::move(vitals));
  } catch (...) {
    if (actor) caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
    throw;
  }
}

std::shared_ptr<Generator> EngineFactory::make_embedder(const std::string& model) {
  auto first = std::find_if(deployment_.engines.begin(), deployment_.engines.end(), [&](const auto& e) { return e.second.model == model; });
  if (first == deployment_.engines.end()) throw PluginError("no engine serves model '" + model + "'");
  EngineDecl decl = first->second;
  decl.name = "embeddings:" + model;
  decl.device = "cpu";
  decl.kv_dtype = TH_DTYPE_F32;
  decl.sliding_window = 0;
  const uint32_t context = deployment_.models.at(model).spec.info.context_len, block = 16;
  LoadReply paged = load_library("kvcache.paged");
  if (!paged.manifest) throw PluginError("embeddings need kvcache.paged: " + paged.error);
  toml::table config;
  config.insert("block_size", int64_t(block));
  config.insert("n_blocks", int64_t((context + block - 1) / block + 1));
  const SlotDecl kv = read_slot_change(*paged.manifest, slot_of(TH_KIND_KVCACHE).name(), config, "the embeddings of model " + model);
  auto weights = draft_model_weights(model, "cpu");
  if (!weights) throw PluginError("no model '" + model + "'");
  auto attention = make_instance(&decl, slot_of(TH_KIND_ATTENTION), decl.slots.at(slot_of(TH_KIND_ATTENTION).name()));
  auto kvcache = make_instance(&decl, slot_of(TH_KIND_KVCACHE), kv);
  std::shared_ptr<PluginInstance> moe;
  if (auto m = decl.slots.find(slot_of(TH_KIND_MOE).name()); m != decl.slots.end()) moe = make_instance(&decl, slot_of(TH_KIND_MOE), m->second);
  return std::make_shared<Generator>(std::move(weights), std::move(attention), std::move(kvcache), 512, std::move(moe));
}

std::shared_ptr<const ModelWeights> EngineFactory::draft_model_weights(const std::string& name, const std::string& device) {
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

LoadReply EngineFactory::load_library(const std::string& id) {
  caf::scoped_actor self{system_};
  LoadReply out;
  self->request(registry_, std::chrono::seconds(60), load_atom::value, id)
      .receive([&](LoadReply& r) { out = std::move(r); },
               [&](caf::error& e) { out.error = "plugin registry: " + system_.render(e); });
  return out;
}

void EngineFactory::load_model(const std::string& name) {
  const ModelDecl& model = deployment_.models.at(name);
  std::lock_guard lock(models_mutex_);
  auto& weights = weights_[name];
  if (!weights && model.loaded) {
    weights = model.loaded->weights;
    tokenizers_[name] = std::make_shared<const Tokenizer>(model.loaded->tokenizer);
    vocabs_[name] = plugin_vocab(*tokenizers_[name]);
    spdlog::info("model {}: {} ({}), {:.1f} MiB mapped, shared by its engines", model.name, model.path, model.spec.architecture,
                 double(weights->bytes) / (1 << 20));
  } else if (!weights) {
    weights = make_synthetic_weights(model.spec, model.seed);
    spdlog::info("model {}: synthetic weights (seed {}), {:.1f} MiB, shared by its engines", model.name, model.seed,
                 double(weights->bytes) / (1 << 20));
  }
}

std::vector<std::string> EngineFactory::loaded_models() const {
  std::lock_guard lock(models_mutex_);
  std::vector<std::string> out;
  for (const auto& [name, w] : weights_) out.push_back(name);
  return out;
}

std::shared_ptr<const Tokenizer> EngineFactory::tokenizer(const std::string& model) const {
  std::lock_guard lock(models_mutex_);
  auto it = tokenizers_.find(model);
  return it == tokenizers_.end() ? nullptr : it->second;
}

nlohmann::json EngineFactory::models_json() const {
  // The models' memory: the weights as loaded (mapped from the file, or made in memory) and the
  // packed copies the CPU backend placed beside them (backends/cpu/weight_packing.hpp), which an
  // operator may turn off per model.
  std::lock_guard lock(models_mutex_);
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
  return models;
}

}  // namespace tokenhost
