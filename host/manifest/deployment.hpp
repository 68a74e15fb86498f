// Deployment manifests (manifests/*.toml): the server's addresses, the models, the engines (a model on
// a device with one plugin per slot), the router and the A/B experiments. Read strictly: every error names file:line:column.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "base/request_defaults.hpp"
#include "backends/backend.hpp"
#include "experiments/experiment.hpp"
#include "manifest/guards_decl.hpp"
#include "manifest/partition_decl.hpp"
#include "plugin/plugin_manifest.hpp"
#include "util/toml_reader.hpp"
#include "plugin/catalog.hpp"
#include "plugin/instance.hpp"
#include "manifest/cluster_decl.hpp"
#include "speculation/draft_controller.hpp"
#include "speculation/draft_limits.hpp"
#include "runtime/gguf_model.hpp"

namespace tokenhost {

struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// The shortest admin token accepted, from the manifest or $TOKENHOST_ADMIN_TOKEN.
constexpr size_t kMinAdminTokenLength = 16;
// The shortest gateway API key accepted.
constexpr size_t kMinApiKeyLength = 8;

// TLS for one port: the PEM certificate chain (the server's certificate first) and its unencrypted PEM
// private key, absolute paths. None: plain HTTP. http/http_tls.hpp loads and checks them.
struct TlsFiles {
  std::string certificate, private_key;
  bool enabled() const { return !certificate.empty(); }
};

struct ServerDecl {
  Endpoint listen{"127.0.0.1", 8080};       // the inference API
  Endpoint admin_listen{"127.0.0.1", 8081}; // the admin API, loopback unless the manifest says otherwise
  std::string log_level = "info";
  std::vector<std::string> plugin_paths;    // absolute; searched before the default paths
  int http_threads = 2;  // the gateway's I/O threads (http/http_servers.cpp caps them at 64)
  // The process-wide compute pool's threads, the engines' without a partition (0: $TOKENHOST_THREADS,
  // else one per core). `serve --threads`.
  uint32_t compute_threads = 0;
  // The admin API's bearer token: $TOKENHOST_ADMIN_TOKEN, else [server] admin_token, else "" (the
  // server then makes a random one at start and writes it to a file only its user can read).
  std::string admin_token;
  // The gateway's API keys: [server] api_keys and the lines of api_keys_file. When any is set, every
  // gateway request must carry one ("Authorization: Bearer KEY", else 401) and per-client limits count
  // by key; when none is, the gateway is open and clients are told apart by address.
  std::vector<std::string> api_keys;
  // Whether POST /admin/plugins may register a plugin.toml outside the plugin folders (plugin_paths,
  // $TOKENHOST_PLUGIN_PATH, the built-in folder). Off: an admin token alone cannot load a library from
  // anywhere on the machine, only from folders the deployment names.
  bool plugins_from_anywhere = false;
  // An engine that stops unasked is rebuilt this long after it stopped, the delay doubling with each
  // stop of the same engine within a minute, up to 4 s (server/engine_supervisor.hpp).
  uint32_t restart_delay_ms = 200;
  // A step (the scheduler's decision, the drafts, the computation) that runs longer marks its engine
  // hung: its requests end, it takes no more, and it is rebuilt once the step returns.
  uint32_t step_deadline_ms = 60000;
  TlsFiles tls;        // the gateway's: [server] tls_certificate and tls_private_key
  TlsFiles admin_tls;  // the admin API's: [server] admin_tls_certificate and admin_tls_private_key
  // [server] record_traffic (`serve --record FILE`): a JSON line per request the gateway finishes
  // (server/traffic_recorder.hpp), what `tokenhost bench --replay` sends again; absolute, "" none.
  // record_text (`--record-text`) keeps the prompts' text too.
  std::string record_traffic;
  bool record_text = false;
};

// What one request and one client may take ([limits]; server/admission.hpp enforces them). A limit of
// 0 is no limit.
struct GatewayLimits {
  // Tokens a request that names no max_tokens generates at most (fewer when the context leaves fewer).
  uint32_t default_max_tokens = kDefaultMaxTokens;
  // Sequences (prompts x n) one client runs at once; past it, 429 with Retry-After.
  uint32_t client_max_sequences = 0;
  // Tokens (prompt + max_tokens when admitted, prompt + generated once done) one client is charged in
  // any 60 seconds; past it, 429 with Retry-After (when enough of the last minute's charges expire).
  uint64_t client_tokens_per_minute = 0;
  // Admission control: a request is admitted while the KV demand of the admitted sequences of its model
  // (prompt + max_tokens each) stays within the model's KV pool (all its engines) times this factor;
  // past it, 503 with Retry-After. Above 1 admits more than fits at once (sequences finish early).
  double kv_admission_factor = 0;
};

// A plugin chosen for a slot: its manifest and its config (defaults merged with the settings).
struct SlotDecl {
  std::string plugin;
  PluginManifest manifest;
  toml::table config;
};

// A synthetic model's shape where its table leaves a key out (the README's [models.tiny] shows them);
// ffn_dim defaults to 4 * dim, n_kv_heads to n_heads, n_experts_used to 2 with experts.
struct SyntheticDefaults {
  static constexpr uint32_t dim = 64, n_layers = 2, n_heads = 4, vocab_size = 256, context_len = 512;
};

struct ModelDecl {
  std::string name;
  std::string source = "synthetic";  // "synthetic": seeded random weights of the declared shape;
                                     // "gguf": the model file at `path`;
                                     // "demo": a file make-model writes on first use, then as gguf;
                                     // "builtin": a model compiled into the binary, written to the
                                     // cache folder once, then as gguf
  std::string path;                  // absolute
  // [models.NAME] aliases: other names requests may give (`model`); the first is the id /v1/models
  // lists (llama-server's --alias, vLLM's --served-model-name). `serve --alias`.
  std::vector<std::string> aliases;
  uint64_t seed = 1;
  ModelSpec spec;
  std::shared_ptr<const LoadedModel> loaded;  // gguf: the mapped file's weights and tokenizer
  WeightPlacement placement;                  // how each engine's backend places them (pack_weights)
};

// An engine's attention_sinks when its manifest sets a sliding_window and no sinks (StreamingLLM's 4).
constexpr uint32_t kDefaultAttentionSinks = 4;

// An engine's kv_dtype when its manifest names none.
constexpr th_dtype kDefaultKvDtype = TH_DTYPE_F16;

struct EngineDecl {
  std::string name;
  std::string model;
  std::string device = "cpu";  // "cpu" or "cuda:N"
  uint32_t max_step_tokens = 512;
  uint32_t max_step_seqs = 64;
  // Element type of the engine's KV cache (TH_DTYPE_F32 or TH_DTYPE_F16): the forward pass writes it,
  // the kvcache plugin allocates it and the attention plugin reads it, so all three see it as the
  // model's th_model_info.kv_dtype (engine_model()).
  th_dtype kv_dtype = kDefaultKvDtype;
  // Speculative decoding (when a spec_decode slot is filled): the most draft tokens one sequence
  // carries in a step (1..kMaxDraftTokens), and how many of them each step verifies (draft_controller.hpp).
  uint32_t max_draft = kDefaultMaxDraft;
  DraftPolicy draft_policy = DraftPolicy::adaptive;
  // Attention sinks with a sliding window (StreamingLLM): each sequence's cache keeps its first
  // attention_sinks positions (rounded up to whole KV blocks) and at most sliding_window positions after
  // them, released oldest first, so a conversation runs past the model's context. 0: no window (the
  // context bounds each request). The engine checks both against its KV blocks when it starts.
  uint32_t sliding_window = 0;
  uint32_t attention_sinks = kDefaultAttentionSinks;
  // The compute partition it computes on ([partitions.NAME], manifest/partition_decl.hpp); empty: the
  // process-wide pool, shared with every engine without one.
  std::string partition;
  // An MoE engine's expert parallelism (expert_partitions, expert_replicas, rebalance_steps).
  ExpertParallelDecl experts;
  // Its role in prefill/decode disaggregation (th_engine_role: TH_ROLE_BOTH, _PREFILL or _DECODE), what
  // a router reads in th_route_request.candidate_roles; "both" by default.
  th_engine_role role = TH_ROLE_BOTH;
  std::map<std::string, SlotDecl> slots;  // by kind name: attention, kvcache, scheduler, [moe], [spec_decode]
  // The stacking slots (SlotInfo::stacks: kv_connector) by kind name: their layers, first called first
  // (the manifest's [[engines.NAME.kv_connector]] tables in order, or one [engines.NAME.kv_connector]).
  std::map<std::string, std::vector<SlotDecl>> stacks;
};

// A model group ([groups.NAME]): one public model name served by several models, each with a declared
// relative cost and quality, among which the router plugin chooses per request (th_router.h). Its
// members share one tokenizer (the server checks when it loads them).
struct GroupMember {
  std::string model;     // a [models] key
  double cost = 1.0;     // relative cost of a million tokens (th_route_candidate.cost_per_mtok), > 0
  double quality = 1.0;  // relative quality, higher is better (th_route_candidate.quality), > 0
};
struct GroupDecl {
  std::string name;
  std::vector<GroupMember> members;  // in the manifest's order (a cascade's order is the router's)
};

struct Deployment {
  std::string file;
  ServerDecl server;
  GatewayLimits limits;
  std::map<std::string, ModelDecl> models;
  std::map<std::string, EngineDecl> engines;
  std::map<std::string, GroupDecl> groups;  // by public name, never a [models] key
  SlotDecl router;
  std::vector<experiments::ExperimentSpec> experiments;  // [experiments.NAME]: they start with the server
  std::shared_ptr<PluginCatalog> catalog;  // the plugins the manifest can name
  GuardsDecl guards;    // [breakers] and [overload]: the router's guards (off when absent)
  std::map<std::string, PartitionDecl> partitions;  // [partitions.NAME]: compute pools of their own
  ClusterDecl cluster;  // [cluster]: this node's place among several (enabled false: a deployment of one)
  // [server], [limits], [models], [groups], [partitions] and [cluster] as the manifest declared them, their paths made absolute: what
  // `tokenhost admin export` writes back (manifest/manifest_export.hpp).
  toml::table declared;
};

// An engine role's manifest name ("both", "prefill", "decode") and back (nullopt for another name).
const char* engine_role_name(th_engine_role role);
std::optional<th_engine_role> engine_role_named(const std::string& name);

// The model an engine serves as its plugins see it: its model's spec with the engine's kv_dtype.
ModelSpec engine_model(const Deployment& d, const EngineDecl& engine);

// Reads and validates a deployment manifest: syntax, keys, types, ranges, references between models
// and engines, plugin ids (against the plugin manifests found) and plugin configs. Throws ManifestError.
Deployment read_deployment(const std::string& file, std::string_view text);
// Where demo models (source = "demo") and the embedded default's relative paths live:
// $TOKENHOST_CACHE, else $XDG_CACHE_HOME/tokenhost, else ~/.cache/tokenhost.
std::string cache_dir();
// The file a server writes its generated admin token to, one per admin port so that two servers on
// one machine do not overwrite each other's: cache_dir()/admin-token-PORT.
std::string admin_token_path(int admin_port);
Deployment read_deployment_file(const std::string& path);

// Validates one slot change (as the admin API receives it): the slot exists, the plugin of manifest
// is of its kind, config is valid for it. Errors are reported against `source` (e.g. "admin request").
// Throws ManifestError.
SlotDecl read_slot_change(const PluginManifest& manifest, const std::string& slot, const toml::table& config,
                          const std::string& source);

// Engines to add to a running deployment d: a TOML document of [engines.NAME] tables in the manifest
// format, on d's models and plugins; names d already has are refused. Errors name source:line:column.
// Throws ManifestError.
std::map<std::string, EngineDecl> read_engine_additions(const Deployment& d, const std::string& source, std::string_view text);

// The manifest the server runs with no argument (manifests/default.toml, compiled in).
std::string_view embedded_default_manifest();

}  // namespace tokenhost
