#include "manifest/deployment.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "manifest/experiment_decl.hpp"
#include "model/builtin_model.hpp"
#include "model/quant.hpp"
#include "backends/backend.hpp"
#include "base/kv_dtypes.hpp"
#include "plugin/kind.hpp"
#include "runtime/make_model.hpp"
#include "runtime/synthetic_model.hpp"
#include "util/system_memory.hpp"
#include "util/text.hpp"

namespace tokenhost {
namespace fs = std::filesystem;

#include "manifest/default_manifest.inc"  // kDefaultManifest: manifests/default.toml, generated at build time

std::string_view embedded_default_manifest() { return kDefaultManifest; }

std::string cache_dir() {
  if (const char* dir = std::getenv("TOKENHOST_CACHE"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/tokenhost";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/tokenhost";
  return (fs::temp_directory_path() / "tokenhost-cache").string();
}

std::string admin_token_path(int admin_port) { return cache_dir() + "/admin-token-" + std::to_string(admin_port); }

namespace {

Endpoint read_endpoint(const TomlReader& r, const toml::table& t, const std::string& key, Endpoint fallback) {
  auto text = r.optional_string(t, key, "[server]");
  if (!text) return fallback;
  const auto split = split_host_port(*text);
  if (!split || split->port < 0 || split->port > 65535)
    r.fail(*t.get(key), "'" + key + "' in [server] must be \"host:port\" (port 0-65535), found \"" + *text + "\"");
  Endpoint e;
  e.host = split->host;
  e.port = split->port;
  return e;
}

// Loads the GGUF file at m.path into m (the table t locates errors).
// default_context: the context served when the manifest names none (the file's when 0).
void load_gguf_decl(const TomlReader& r, const toml::table& t, const std::string& ctx, ModelDecl& m,
                    uint32_t default_context = 0) {
  const toml::node& where = t.get("path") ? *t.get("path") : static_cast<const toml::node&>(t);
  std::error_code ec;
  if (!fs::is_regular_file(m.path, ec)) r.fail(where, "model file '" + m.path + "' does not exist");
  m.placement.pack = r.optional_bool(t, "pack_weights", ctx).value_or(m.placement.pack);
  try {
    m.loaded = std::make_shared<LoadedModel>(load_gguf_model(m.path, m.name));
  } catch (const std::exception& e) {
    r.fail(where, e.what());
  }
  m.spec = m.loaded->weights->spec;
  std::optional<int64_t> ctx_len = r.optional_int(t, "context_len", ctx, 1, m.spec.info.context_len);
  if (!ctx_len && default_context > 0 && default_context < m.spec.info.context_len) ctx_len = default_context;
  if (ctx_len) {
    // A shorter context than the file's: less KV memory per sequence.
    m.spec.info.context_len = uint32_t(*ctx_len);
    auto w = std::make_shared<ModelWeights>(*m.loaded->weights);
    w->spec.info.context_len = m.spec.info.context_len;
    auto loaded = std::make_shared<LoadedModel>(*m.loaded);
    loaded->weights = w;
    m.loaded = loaded;
  }
}

// A path from a manifest: relative to the manifest's folder (the embedded default has none: its
// relative paths are in the cache folder).
std::string manifest_path(const TomlReader& r, const std::string& path) {
  if (fs::path(path).is_absolute()) return fs::path(path).lexically_normal().string();
  fs::path base = r.file().rfind("<embedded", 0) == 0 ? fs::path(cache_dir()) : fs::absolute(r.file()).parent_path();
  return (base / path).lexically_normal().string();
}

// source = "demo": a model make-model writes on first use (seeded random weights, a working tokenizer),
// so the embedded default serves without any download. Its text is fluent-looking noise.
ModelDecl read_demo_model(const TomlReader& r, const std::string& name, const toml::table& t, const std::string& ctx) {
  r.check_keys(t, {"source", "preset", "type", "seed", "path", "context_len", "pack_weights", "aliases"}, ctx);
  MakeModelOptions make;
  std::string preset = r.optional_string(t, "preset", ctx).value_or("stories260K");
  try {
    make.shape = model_shape_preset(preset);
  } catch (const std::invalid_argument& e) {
    r.fail(*t.get("preset"), e.what());
  }
  std::string type = r.optional_string(t, "type", ctx).value_or("f32");
  make.type = quant::supported_dtype(type);
  if (make.type < 0) r.fail(*t.get("type"), "unknown weight type '" + type + "' in " + ctx + " (" + quant::supported_dtype_names() + ")");
  make.seed = uint64_t(r.optional_int(t, "seed", ctx, 0).value_or(1));
  ModelDecl m;
  m.name = name;
  m.source = "demo";
  m.seed = make.seed;
  auto path = r.optional_string(t, "path", ctx);
  // Without a path the file goes to the cache folder, whichever manifest names it.
  m.path = path ? manifest_path(r, *path)
                : (fs::path(cache_dir()) / ("demo-" + preset + "-" + type + "-seed" + std::to_string(make.seed) + ".gguf")).string();
  std::error_code ec;
  if (!fs::is_regular_file(m.path, ec)) {
    spdlog::info("model {}: writing a demo model to {} (preset {}, {}, seeded random weights: its text is noise; "
                 "serve a real model with `tokenhost serve --model FILE.gguf`)", name, m.path, preset, type);
    fs::create_directories(fs::path(m.path).parent_path(), ec);
    make.path = m.path;
    int shown = 0;
    make.progress = [&](double f) {
      if (int(f * 4) > shown) spdlog::info("model {}: {}% written", name, 25 * (shown = int(f * 4)));
    };
    try {
      make_model(make);
    } catch (const std::exception& e) {
      r.fail(t, ctx + ": could not write the demo model to " + m.path + ": " + e.what());
    }
  }
  load_gguf_decl(r, t, ctx, m);
  return m;
}

// source = "builtin": a model compiled into the binary (model/builtin_model.hpp), written once into the
// cache folder and loaded from there as a GGUF file; served at its trained context unless told.
ModelDecl read_builtin_model(const TomlReader& r, const std::string& name, const toml::table& t, const std::string& ctx) {
  r.check_keys(t, {"source", "name", "context_len", "pack_weights", "aliases"}, ctx + " (a builtin model)");
  const std::string which = r.optional_string(t, "name", ctx).value_or("stories260K");
  const BuiltinModel* builtin = find_builtin_model(which);
  if (builtin == nullptr) {
    r.fail(t.get("name") ? *t.get("name") : static_cast<const toml::node&>(t),
           "no builtin model '" + which + "' (this binary has: " + join(builtin_model_names(), ", ") + ")");
  }
  ModelDecl m;
  m.name = name;
  m.source = "builtin";
  try {
    m.path = materialize_builtin_model(*builtin, cache_dir());
  } catch (const std::exception& e) {
    r.fail(t, ctx + ": " + e.what());
  }
  load_gguf_decl(r, t, ctx, m, builtin->context_len);
  return m;
}

ModelDecl read_gguf_model(const TomlReader& r, const std::string& name, const toml::table& t, const std::string& ctx) {
  r.check_keys(t, {"source", "path", "context_len", "pack_weights", "aliases"}, ctx + " (a gguf model takes its shape from the file)");
  ModelDecl m;
  m.name = name;
  m.source = "gguf";
  m.path = manifest_path(r, r.require_string(t, "path", ctx));
  load_gguf_decl(r, t, ctx, m);
  return m;
}

ModelDecl read_model_of_source(const TomlReader& r, const std::string& name, const toml::node& node) {
  std::string ctx = "[models." + name + "]";
  if (!node.is_table()) r.fail(node, ctx + " must be a table");
  const toml::table& t = *node.as_table();
  std::string source = r.optional_string(t, "source", ctx).value_or("synthetic");
  if (source == "gguf") return read_gguf_model(r, name, t, ctx);
  if (source == "demo") return read_demo_model(r, name, t, ctx);
  if (source == "builtin") return read_builtin_model(r, name, t, ctx);
  if (source != "synthetic") {
    r.fail(*t.get("source"), "unknown model source '" + source + "' in " + ctx +
                                 suggestion(source, {"synthetic", "gguf", "demo", "builtin"}));
  }
  r.check_keys(t, {"source", "seed", "architecture", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim",
                   "vocab_size", "context_len", "n_experts", "n_experts_used", "aliases"}, ctx);
  ModelDecl m;
  m.name = name;
  m.spec.name = name;
  m.source = source;
  m.seed = uint64_t(r.optional_int(t, "seed", ctx, 0).value_or(1));
  m.spec.architecture = r.optional_string(t, "architecture", ctx).value_or("llama");
  th_model_info& i = m.spec.info;
  i.dim = uint32_t(r.optional_int(t, "dim", ctx, 8, 16384).value_or(SyntheticDefaults::dim));
  i.n_layers = uint32_t(r.optional_int(t, "n_layers", ctx, 1, 256).value_or(SyntheticDefaults::n_layers));
  i.n_heads = uint32_t(r.optional_int(t, "n_heads", ctx, 1, 256).value_or(SyntheticDefaults::n_heads));
  i.n_kv_heads = uint32_t(r.optional_int(t, "n_kv_heads", ctx, 1, 256).value_or(i.n_heads));
  i.ffn_dim = uint32_t(r.optional_int(t, "ffn_dim", ctx, 1, 65536).value_or(4 * i.dim));
  i.vocab_size = uint32_t(r.optional_int(t, "vocab_size", ctx, 256, 1 << 20).value_or(SyntheticDefaults::vocab_size));
  i.context_len = uint32_t(r.optional_int(t, "context_len", ctx, 1, 1 << 20).value_or(SyntheticDefaults::context_len));
  i.n_experts = uint32_t(r.optional_int(t, "n_experts", ctx, 0, 1024).value_or(0));
  i.n_experts_used = uint32_t(r.optional_int(t, "n_experts_used", ctx, 0, 1024).value_or(i.n_experts ? 2 : 0));
  if (i.dim % i.n_heads != 0) r.fail(t, ctx + ": dim " + std::to_string(i.dim) + " is not a multiple of n_heads " + std::to_string(i.n_heads));
  if (i.n_heads % i.n_kv_heads != 0) r.fail(t, ctx + ": n_heads " + std::to_string(i.n_heads) + " is not a multiple of n_kv_heads " + std::to_string(i.n_kv_heads));
  if (i.n_experts_used > i.n_experts) r.fail(t, ctx + ": n_experts_used exceeds n_experts");
  i.head_dim = i.dim / i.n_heads;
  // Each dimension has its range; their product must fit too (serve allocates it all at start).
  const uint64_t bytes = synthetic_weight_bytes(i), memory = physical_memory_bytes();
  if (memory > 0 && bytes > memory)
    r.fail(t, ctx + ": a synthetic model of this shape holds " + std::to_string(bytes >> 20) + " MiB of f32 weights, more than this machine's memory (" +
                  std::to_string(memory >> 20) + " MiB)");
  i.weight_dtype = TH_DTYPE_F32;
  i.act_dtype = TH_DTYPE_F32;
  i.kv_dtype = TH_DTYPE_F32;
  return m;
}

// A model's table, whatever its source, and the other names clients may ask it by (aliases).
ModelDecl read_model(const TomlReader& r, const std::string& name, const toml::node& node) {
  ModelDecl m = read_model_of_source(r, name, node);
  const std::string ctx = "[models." + name + "]";
  for (const std::string& alias : r.optional_string_array(*node.as_table(), "aliases", ctx)) {
    if (alias.empty() || alias.size() > 256 || alias.find('/') == 0)
      r.fail(*node.as_table()->get("aliases"), "an alias in " + ctx + " must be 1 to 256 characters, not starting with '/'");
    m.aliases.push_back(alias);
  }
  return m;
}

// The slot's plugin is manifest: check its kind and its config (both located in r's document).
SlotDecl slot_of(const TomlReader& r, const PluginManifest& manifest, const std::string& slot, const toml::table& t,
                 const std::string& ctx) {
  if (kind_name(manifest.kind) != slot) {
    r.fail(*t.get("plugin"), "plugin '" + manifest.id + "' is a " + kind_name(manifest.kind) + " plugin; " + ctx +
                                 " needs a " + slot + " plugin");
  }
  SlotDecl s;
  s.plugin = manifest.id;
  s.manifest = manifest;
  s.config = merge_plugin_config(manifest, r, r.optional_table(t, "config", ctx), ctx + ".config");
  return s;
}

SlotDecl read_slot(const TomlReader& r, const PluginCatalog& catalog, const std::string& slot,
                   const toml::node& node, const std::string& ctx) {
  if (!node.is_table()) r.fail(node, ctx + " must be a table with 'plugin' and optional 'config'");
  const toml::table& t = *node.as_table();
  r.check_keys(t, {"plugin", "config"}, ctx);
  std::string plugin = r.require_string(t, "plugin", ctx);
  auto manifest = catalog.find(plugin);
  if (!manifest) {
    std::vector<std::string> ids;
    for (const auto& m : catalog.all()) ids.push_back(m.id);
    r.fail(*t.get("plugin"), "unknown plugin '" + plugin + "' in " + ctx + suggestion(plugin, ids) +
                                 "; searched " + join(catalog.search_paths(), ":"));
  }
  return slot_of(r, *manifest, slot, t, ctx);
}

}  // namespace

const char* engine_role_name(th_engine_role role) {
  return role == TH_ROLE_PREFILL ? "prefill" : role == TH_ROLE_DECODE ? "decode" : "both";
}
std::optional<th_engine_role> engine_role_named(const std::string& name) {
  for (th_engine_role r : {TH_ROLE_BOTH, TH_ROLE_PREFILL, TH_ROLE_DECODE})
    if (name == engine_role_name(r)) return r;
  return std::nullopt;
}

namespace {

EngineDecl read_engine(const TomlReader& r, const Deployment& d, const std::string& name, const toml::node& node) {
  std::string ctx = "[engines." + name + "]";
  if (!node.is_table()) r.fail(node, ctx + " must be a table");
  const toml::table& t = *node.as_table();
  std::vector<std::string> known = {"model", "device", "max_step_tokens", "max_step_seqs", "kv_dtype", "max_draft", "draft_policy",
                                     "sliding_window", "attention_sinks", "partition", "role",
                                     "expert_partitions", "expert_replicas", "rebalance_steps"};
  known.insert(known.end(), engine_slot_names().begin(), engine_slot_names().end());
  r.check_keys(t, known, ctx);
  EngineDecl e;
  e.name = name;
  e.model = r.require_string(t, "model", ctx);
  auto model = d.models.find(e.model);
  if (model == d.models.end()) {
    std::vector<std::string> names;
    for (const auto& [n, m] : d.models) names.push_back(n);
    r.fail(*t.get("model"), "engine '" + name + "' names unknown model '" + e.model + "'" + suggestion(e.model, names));
  }
  e.device = r.optional_string(t, "device", ctx).value_or(EngineDecl{}.device);
  int32_t device_index = 0;
  std::string why;
  const Backend* backend = find_backend(e.device, &device_index, &why);
  if (backend == nullptr) {
    std::vector<std::string> names;
    for (const Backend* b : backends()) names.push_back(std::string(b->name()) + (b == backends().front() ? "" : ":<index>"));
    r.fail(*t.get("device"), "device '" + e.device + "' in " + ctx + " must be \"" + join(names, "\" or \"") + "\" (" + why + ")");
  }
  if (const std::string why = backend->cannot_run(device_index); !why.empty()) {
    r.fail(*t.get("device"), "device '" + e.device + "' in " + ctx + ": " + why + "; use device = \"cpu\"");
  }
  e.max_step_tokens = uint32_t(r.optional_int(t, "max_step_tokens", ctx, 1, 1 << 20).value_or(EngineDecl{}.max_step_tokens));
  e.max_step_seqs = uint32_t(r.optional_int(t, "max_step_seqs", ctx, 1, 1 << 16).value_or(EngineDecl{}.max_step_seqs));
  if (auto kv = r.optional_string(t, "kv_dtype", ctx)) {
    if (auto type = kv_dtype_named(*kv)) e.kv_dtype = *type;
    else r.fail(*t.get("kv_dtype"), "kv_dtype '" + *kv + "' in " + ctx + " is not one of " + join(kv_dtype_names(), ", ") + suggestion(*kv, kv_dtype_names()));
  }
  e.max_draft = uint32_t(r.optional_int(t, "max_draft", ctx, 1, kMaxDraftTokens).value_or(EngineDecl{}.max_draft));
  if (auto policy = r.optional_string(t, "draft_policy", ctx); policy && !parse_draft_policy(*policy, e.draft_policy))
    r.fail(*t.get("draft_policy"), "draft_policy '" + *policy + "' in " + ctx + " is not one of fixed, adaptive" +
                                       suggestion(*policy, {"fixed", "adaptive"}));
  e.sliding_window = uint32_t(r.optional_int(t, "sliding_window", ctx, 0, 1 << 24).value_or(0));
  if (auto sinks = r.optional_int(t, "attention_sinks", ctx, 0, 1 << 20)) {
    if (e.sliding_window == 0)
      r.fail(*t.get("attention_sinks"), "attention_sinks in " + ctx + " keeps positions of a sliding window: set sliding_window too");
    e.attention_sinks = uint32_t(*sinks);
  }
  if (auto partition = r.optional_string(t, "partition", ctx)) {
    if (!d.partitions.count(*partition)) {
      std::vector<std::string> names;
      for (const auto& [n, p] : d.partitions) names.push_back(n);
      r.fail(*t.get("partition"), "engine '" + name + "' names unknown partition '" + *partition + "'" +
                                      (names.empty() ? std::string(" (the manifest declares no [partitions])") : suggestion(*partition, names)));
    }
    e.partition = *partition;
  }
  e.experts = read_expert_parallel(r, t, ctx, d.partitions, model->second.spec.info.n_experts);
  if (auto role = r.optional_string(t, "role", ctx)) {
    if (auto parsed = engine_role_named(*role)) e.role = *parsed;
    else r.fail(*t.get("role"), "role '" + *role + "' in " + ctx + " is not one of both, prefill, decode" +
                                    suggestion(*role, {"both", "prefill", "decode"}));
  }
  // Whole blocks are checked when the engine starts (its kvcache's block size); the context here.
  if (const uint32_t context = model->second.spec.info.context_len;
      e.sliding_window > 0 && uint64_t(e.sliding_window) + e.attention_sinks > context)
    r.fail(*t.get("sliding_window"), "sliding_window " + std::to_string(e.sliding_window) + " and attention_sinks " +
                                         std::to_string(e.attention_sinks) + " in " + ctx + " pass the context of model '" + e.model +
                                         "' (" + std::to_string(context) + " positions), past which its position embeddings were never trained");
  for (const auto& slot : engine_slot_names()) {
    const toml::node* s = t.get(slot);
    const SlotInfo& info = *find_slot(slot);
    if (s == nullptr) {
      if (slot_required(info, model->second.spec.info.n_experts))
        r.fail(t, ctx + " has no [" + "engines." + name + "." + slot + "] slot (a " + slot + " plugin is required" +
                      (info.need == SlotNeed::moe_models ? " for an MoE model)" : ")"));
      // An optional slot with a default plugin (constraint: constraint.gbnf) is filled for a model with
      // a vocabulary (its plugins read th_create_args.vocab) when the catalog has that plugin.
      if (!info.stacks && *info.default_plugin != '\0' && info.need == SlotNeed::optional && model->second.loaded &&
          d.catalog->find(info.default_plugin)) {
        toml::table implicit;
        implicit.insert("plugin", info.default_plugin);
        e.slots.emplace(slot, read_slot(r, *d.catalog, slot, implicit, "[engines." + name + "." + slot + "] (default)"));
      }
      continue;
    }
    if (info.stacks) {  // one table (one layer) or an array of tables (the layers, first called first)
      const std::string where = "[[engines." + name + "." + slot + "]]";
      std::vector<SlotDecl>& layers = e.stacks[slot];
      if (const toml::array* a = s->as_array()) {
        if (a->empty()) r.fail(*s, where + " lists no layer (leave the key out for none)");
        for (size_t i = 0; i < a->size(); ++i)
          layers.push_back(read_slot(r, *d.catalog, slot, *a->get(i), where + " #" + std::to_string(i + 1)));
      } else {
        layers.push_back(read_slot(r, *d.catalog, slot, *s, "[engines." + name + "." + slot + "]"));
      }
      continue;
    }
    e.slots.emplace(slot, read_slot(r, *d.catalog, slot, *s, "[engines." + name + "." + slot + "]"));
  }
  return e;
}

// [server] api_keys (an array) and api_keys_file (one key per line; blank lines and '#' comments skipped).
void read_api_keys(const TomlReader& r, const toml::table& s, const fs::path& base, std::vector<std::string>& keys) {
  auto check = [&](const std::string& key, const std::string& where) {
    if (key.size() < kMinApiKeyLength || key.find_first_of(" \t\r\n\"") != std::string::npos)
      throw ManifestError(r.file(), 1, 1, where + ": an API key must be at least " + std::to_string(kMinApiKeyLength) +
                                              " characters without spaces or quotes");
    keys.push_back(key);
  };
  for (const auto& key : r.optional_string_array(s, "api_keys", "[server]")) check(key, "[server] api_keys");
  if (auto file = r.optional_string(s, "api_keys_file", "[server]")) {
    const std::string path = (base / *file).lexically_normal().string();
    std::string text;
    try {
      text = TomlReader::read_text(path);
    } catch (const ManifestError& e) {
      r.fail(*s.get("api_keys_file"), "api_keys_file: " + std::string(e.what()));
    }
    std::istringstream lines(text);
    std::string line;
    for (int n = 1; std::getline(lines, line); ++n) {
      const size_t a = line.find_first_not_of(" \t\r"), b = line.find_last_not_of(" \t\r");
      if (a == std::string::npos || line[a] == '#') continue;
      check(line.substr(a, b - a + 1), path + ":" + std::to_string(n));
    }
    if (keys.empty()) r.fail(*s.get("api_keys_file"), "api_keys_file " + path + " holds no key");
  }
}

// [server] PREFIXtls_certificate and PREFIXtls_private_key: both or neither, each a file (relative to the
// manifest's folder). What they hold is checked when they are loaded (serve, `tokenhost check`).
TlsFiles read_tls(const TomlReader& r, const toml::table& s, const std::string& prefix) {
  const std::string cert_key = prefix + "tls_certificate", key_key = prefix + "tls_private_key";
  auto cert = r.optional_string(s, cert_key, "[server]");
  auto key = r.optional_string(s, key_key, "[server]");
  if (!cert && !key) return {};
  if (!cert || !key)
    r.fail(*s.get(cert ? cert_key : key_key), "'" + (cert ? cert_key : key_key) + "' in [server] needs '" +
                                                  (cert ? key_key : cert_key) + "' beside it (TLS takes a certificate and its key)");
  TlsFiles tls{manifest_path(r, *cert), manifest_path(r, *key)};
  for (const auto& [name, path] : {std::pair{cert_key, tls.certificate}, std::pair{key_key, tls.private_key}}) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) r.fail(*s.get(name), "'" + name + "' in [server]: " + path + " is not a file");
  }
  return tls;
}

void read_limits(const TomlReader& r, const toml::table& t, GatewayLimits& limits) {
  const std::string where = "[limits]";
  r.check_keys(t, {"default_max_tokens", "client_max_sequences", "client_tokens_per_minute", "kv_admission_factor"}, where);
  limits.default_max_tokens =
      uint32_t(r.optional_int(t, "default_max_tokens", where, 1, kMaxTokensLimit).value_or(limits.default_max_tokens));
  limits.client_max_sequences =
      uint32_t(r.optional_int(t, "client_max_sequences", where, 0, 1 << 20).value_or(limits.client_max_sequences));
  limits.client_tokens_per_minute =
      uint64_t(r.optional_int(t, "client_tokens_per_minute", where, 0, int64_t(1) << 40).value_or(int64_t(limits.client_tokens_per_minute)));
  if (const toml::node* f = t.get("kv_admission_factor")) {
    std::optional<double> v = f->is_integer() ? std::optional<double>(double(f->as_integer()->get())) : f->value<double>();
    if (!v || !(*v >= 0 && *v <= 1000))
      r.fail(*f, "'kv_admission_factor' in [limits] must be a number from 0 (off) to 1000, found " +
                     (v ? (std::ostringstream() << *v).str() : toml_type_name(*f)));
    limits.kv_admission_factor = *v;
  }
}

// A number in (0, 1e9] at t[key] (integer or float), or fallback when absent.
double positive_number(const TomlReader& r, const toml::table& t, const std::string& key, const std::string& where, double fallback) {
  const toml::node* f = t.get(key);
  if (f == nullptr) return fallback;
  std::optional<double> v = f->is_integer() ? std::optional<double>(double(f->as_integer()->get())) : f->value<double>();
  if (!v || !(*v > 0 && *v <= 1e9))
    r.fail(*f, "'" + key + "' in " + where + " must be a number above 0 (at most 1e9), found " +
                   (v ? (std::ostringstream() << *v).str() : toml_type_name(*f)));
  return *v;
}

// [groups.NAME]: members = [{ model, cost, quality }, ...], each a declared model, once.
GroupDecl read_group(const TomlReader& r, const Deployment& d, const std::string& name, const toml::node& node) {
  const std::string where = "[groups." + name + "]";
  const toml::table* t = node.as_table();
  if (t == nullptr) r.fail(node, where + " must be a table");
  if (d.models.count(name))
    r.fail(node, "group '" + name + "' has the name of a model in [models]: a public name means one thing");
  r.check_keys(*t, {"members"}, where);
  const toml::node* members = t->get("members");
  if (members == nullptr) r.fail(*t, where + " needs 'members': [{ model = \"...\", cost = 1.0, quality = 1.0 }, ...]");
  const toml::array* list = members->as_array();
  if (list == nullptr || list->empty()) r.fail(*members, "'members' in " + where + " must be a non-empty array of tables");
  GroupDecl g;
  g.name = name;
  for (const auto& m : *list) {
    const toml::table* mt = m.as_table();
    if (mt == nullptr) r.fail(m, "each of 'members' in " + where + " must be a table { model = ..., cost = ..., quality = ... }");
    const std::string at = "a member of " + where;
    r.check_keys(*mt, {"model", "cost", "quality"}, at);
    GroupMember member;
    member.model = r.require_string(*mt, "model", at);
    if (!d.models.count(member.model)) {
      std::vector<std::string> names;
      for (const auto& [n, _] : d.models) names.push_back(n);
      r.fail(*mt->get("model"), "model '" + member.model + "' of " + where + " is not in [models]" + suggestion(member.model, names));
    }
    for (const auto& other : g.members)
      if (other.model == member.model) r.fail(*mt->get("model"), "model '" + member.model + "' is listed twice in " + where);
    member.cost = positive_number(r, *mt, "cost", at, 1.0);
    member.quality = positive_number(r, *mt, "quality", at, 1.0);
    g.members.push_back(std::move(member));
  }
  return g;
}

}  // namespace

ModelSpec engine_model(const Deployment& d, const EngineDecl& engine) {
  return d.models.at(engine.model).spec.with_kv_dtype(engine.kv_dtype);
}

// [server], [limits] and [models] of r's (valid) manifest, each path in them absolute, so that the
// tables mean the same written anywhere else.
static toml::table declared_tables(const TomlReader& r) {
  toml::table out;
  for (const char* key : {"server", "limits", "models", "groups", "partitions", "cluster"})
    if (const toml::table* t = r.root()[key].as_table()) out.insert(key, *t);
  auto absolute = [&](toml::table& t, const char* key) {
    if (auto* v = t[key].as_string()) *v = manifest_path(r, v->get());
  };
  if (toml::table* server = out["server"].as_table()) {
    for (const char* key : {"api_keys_file", "tls_certificate", "tls_private_key", "admin_tls_certificate", "admin_tls_private_key"})
      absolute(*server, key);
    if (toml::array* paths = (*server)["plugin_paths"].as_array())
      for (auto& p : *paths)
        if (auto* v = p.as_string()) *v = manifest_path(r, v->get());
  }
  if (toml::table* cluster = out["cluster"].as_table()) absolute(*cluster, "certs");
  if (toml::table* models = out["models"].as_table())
    for (auto& [name, m] : *models)
      if (toml::table* t = m.as_table()) absolute(*t, "path");
  return out;
}

Deployment read_deployment(const std::string& file, std::string_view text) {
  TomlReader r(file, text);
  const toml::table& root = r.root();
  const std::string router_key = slot_of(TH_KIND_ROUTER).name();  // the router slot's table
  r.check_keys(root, {"server", "models", "groups", "engines", router_key, "experiments", "limits", "cluster", "breakers", "overload",
                      "partitions"},
               "the deployment manifest");
  Deployment d;
  d.file = file;
  fs::path base = fs::absolute(file).parent_path();
  if (const toml::table* s = r.optional_table(root, "server", "the deployment manifest")) {
    r.check_keys(*s, {"listen", "admin_listen", "log_level", "plugin_paths", "http_threads", "compute_threads", "admin_token", "api_keys",
                      "api_keys_file", "plugins_from_anywhere", "tls_certificate", "tls_private_key",
                      "admin_tls_certificate", "admin_tls_private_key", "restart_delay_ms", "step_deadline_ms", "record_traffic",
                      "record_text"},
                 "[server]");
    d.server.listen = read_endpoint(r, *s, "listen", d.server.listen);
    d.server.admin_listen = read_endpoint(r, *s, "admin_listen", d.server.admin_listen);
    d.server.log_level = r.optional_string(*s, "log_level", "[server]").value_or(ServerDecl{}.log_level);
    static const std::vector<std::string> levels = {"trace", "debug", "info", "warn", "error", "critical", "off"};
    if (std::find(levels.begin(), levels.end(), d.server.log_level) == levels.end()) {
      r.fail(*s->get("log_level"), "unknown log_level '" + d.server.log_level + "'" + suggestion(d.server.log_level, levels));
    }
    for (const auto& p : r.optional_string_array(*s, "plugin_paths", "[server]"))
      d.server.plugin_paths.push_back((base / p).lexically_normal().string());
    d.server.http_threads = int(r.optional_int(*s, "http_threads", "[server]", 1, 4096).value_or(ServerDecl{}.http_threads));
    d.server.compute_threads = uint32_t(r.optional_int(*s, "compute_threads", "[server]", 0, kMaxPartitionThreads).value_or(0));
    if (auto token = r.optional_string(*s, "admin_token", "[server]")) {
      if (token->size() < kMinAdminTokenLength)
        r.fail(*s->get("admin_token"), "'admin_token' in [server] must be at least " + std::to_string(kMinAdminTokenLength) + " characters");
      d.server.admin_token = *token;
    }
    read_api_keys(r, *s, base, d.server.api_keys);
    d.server.plugins_from_anywhere = r.optional_bool(*s, "plugins_from_anywhere", "[server]").value_or(false);
    d.server.restart_delay_ms =
        uint32_t(r.optional_int(*s, "restart_delay_ms", "[server]", 1, 60000).value_or(ServerDecl{}.restart_delay_ms));
    d.server.step_deadline_ms =
        uint32_t(r.optional_int(*s, "step_deadline_ms", "[server]", 10, 3600000).value_or(ServerDecl{}.step_deadline_ms));
    if (auto path = r.optional_string(*s, "record_traffic", "[server]")) {
      if (path->empty()) r.fail(*s->get("record_traffic"), "'record_traffic' in [server] is empty: name the file to append to");
      d.server.record_traffic = (base / *path).lexically_normal().string();
    }
    d.server.record_text = r.optional_bool(*s, "record_text", "[server]").value_or(false);
    if (d.server.record_text && d.server.record_traffic.empty())
      r.fail(*s->get("record_text"), "'record_text' in [server] keeps the recorded prompts' text: set record_traffic too");
    d.server.tls = read_tls(r, *s, "");
    d.server.admin_tls = read_tls(r, *s, "admin_");
  }
  if (const toml::table* l = r.optional_table(root, "limits", "the deployment manifest")) read_limits(r, *l, d.limits);
  d.guards = read_guards(r, root);
  if (const char* env = std::getenv("TOKENHOST_ADMIN_TOKEN"); env && *env) {
    // The same rule whatever the source: a short token can be guessed.
    if (std::strlen(env) < kMinAdminTokenLength)
      throw ManifestError(r.file(), 1, 1, "$TOKENHOST_ADMIN_TOKEN must be at least " + std::to_string(kMinAdminTokenLength) +
                                              " characters (it has " + std::to_string(std::strlen(env)) + ")");
    d.server.admin_token = env;
  }
  std::vector<std::string> paths = d.server.plugin_paths;
  for (auto& p : default_plugin_paths()) paths.push_back(p);
  d.catalog = std::make_shared<PluginCatalog>(paths);
  d.catalog->scan();

  const toml::table& models = r.require_table(root, "models", "the deployment manifest");
  for (const auto& [key, node] : models) {
    std::string name(key.str());
    d.models.emplace(name, read_model(r, name, node));
  }
  if (d.models.empty()) r.fail(models, "[models] declares no model");
  if (const toml::table* c = r.optional_table(root, "cluster", "the deployment manifest")) d.cluster = read_cluster(r, *c, base.string());
  if (const toml::table* p = r.optional_table(root, "partitions", "the deployment manifest")) d.partitions = read_partitions(r, *p);
  // A head may run no engine of its own: its workers' serve its models.
  const toml::table* engines = d.cluster.workers.empty() ? &r.require_table(root, "engines", "the deployment manifest")
                                                          : r.optional_table(root, "engines", "the deployment manifest");
  if (engines != nullptr) {
    for (const auto& [key, node] : *engines) {
      std::string name(key.str());
      d.engines.emplace(name, read_engine(r, d, name, node));
    }
    if (d.engines.empty() && d.cluster.workers.empty()) r.fail(*engines, "[engines] declares no engine");
  }
  if (const toml::table* groups = r.optional_table(root, "groups", "the deployment manifest"))
    for (const auto& [key, node] : *groups) {
      std::string name(key.str());
      d.groups.emplace(name, read_group(r, d, name, node));
    }
  // A name a client asks for means one model or group: aliases collide with no name nor other alias.
  {
    std::map<std::string, std::string> names;  // name -> what it names
    for (const auto& [name, g] : d.groups) names[name] = "[groups." + name + "]";
    for (const auto& [name, m] : d.models) names[name] = "[models." + name + "]";
    for (const auto& [name, m] : d.models)
      for (const std::string& alias : m.aliases) {
        const auto [it, fresh] = names.emplace(alias, "[models." + name + "]");
        if (!fresh && it->second != "[models." + name + "]")
          r.fail(*models.get(name)->as_table()->get("aliases"),
                 "alias '" + alias + "' of [models." + name + "] is already a name of " + it->second);
      }
  }
  if (const toml::node* router = root.get(router_key)) {
    d.router = read_slot(r, *d.catalog, router_key, *router, "[" + router_key + "]");
  } else {
    toml::table implicit;
    implicit.insert("plugin", slot_of(TH_KIND_ROUTER).info().default_plugin);
    d.router = read_slot(r, *d.catalog, router_key, implicit, "[" + router_key + "] (default)");
  }
  if (const toml::table* experiments = r.optional_table(root, "experiments", "the deployment manifest"))
    d.experiments = read_experiments(r, *experiments, d.engines);
  d.declared = declared_tables(r);
  return d;
}

Deployment read_deployment_file(const std::string& path) { return read_deployment(path, TomlReader::read_text(path)); }

std::map<std::string, EngineDecl> read_engine_additions(const Deployment& d, const std::string& source, std::string_view text) {
  TomlReader r(source, text);
  r.check_keys(r.root(), {"engines"}, "an engine addition");
  const toml::table& engines = r.require_table(r.root(), "engines", "an engine addition");
  std::map<std::string, EngineDecl> out;
  for (const auto& [key, node] : engines) {
    std::string name(key.str());
    if (d.engines.count(name)) r.fail(node, "engine '" + name + "' exists already; remove it first or choose another name");
    out.emplace(name, read_engine(r, d, name, node));
  }
  if (out.empty()) r.fail(engines, "[engines] declares no engine");
  return out;
}

SlotDecl read_slot_change(const PluginManifest& manifest, const std::string& slot, const toml::table& config,
                          const std::string& source) {
  if (find_slot(slot) == nullptr) {
    std::vector<std::string> slots;
    for (const auto& s : slot_table()) slots.emplace_back(s.name);
    throw ManifestError(source, 1, 1, "unknown slot '" + slot + "'" + suggestion(slot, slots));
  }
  toml::table change;
  change.insert("plugin", manifest.id);
  change.insert("config", config);
  std::ostringstream text;
  text << change;
  TomlReader r(source, text.str());
  return slot_of(r, manifest, slot, r.root(), "the " + slot + " slot");
}

}  // namespace tokenhost
