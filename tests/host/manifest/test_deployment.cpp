// Deployment manifests: a good one reads; each kind of mistake is an error at its file:line:column
// saying what was expected, an unknown key names the closest known one.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "manifest/deployment.hpp"
#include "runtime/make_model.hpp"
#include "runtime/synthetic_model.hpp"
#include "skip.hpp"
#include "test_server.hpp"

namespace manifest_deployment_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

// The error for text, as "line:column: message" (the file name is checked once, below).
std::string error_of(const std::string& text) {
  try {
    read_deployment("bad.toml", text);
  } catch (const ManifestError& e) {
    REQUIRE(e.file() == "bad.toml");
    return std::to_string(e.line()) + ":" + std::to_string(e.column()) + ": " + e.message();
  }
  return "(no error)";
}

const std::string kModel = "[models.m]\ndim = 32\nn_heads = 4\n";
const std::string kEngine = R"([engines.e]
model = "m"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.fifo" }
)";

}  // namespace

TEST_CASE("deployment: the test manifest and the embedded default read", "[manifest]") {
  Deployment d = read_deployment("test.toml", test_manifest());
  REQUIRE(d.engines.at("main").slots.at("kvcache").config.get("block_size")->value<int64_t>() == 8);
  REQUIRE(d.engines.at("main").slots.at("kvcache").config.get("n_blocks")->value<int64_t>() == 256);
  REQUIRE(d.engines.at("main").slots.at("scheduler").config.get("max_prefill_chunk")->value<int64_t>() == 16);
  REQUIRE(d.router.plugin == "router.round_robin");  // the default router
  REQUIRE(d.models.at("tiny").spec.info.head_dim == 8);

  Deployment def = read_deployment("default.toml", embedded_default_manifest());
  REQUIRE(def.engines.count("main") == 1);
  REQUIRE(def.server.listen.port == 8080);
  REQUIRE(def.server.admin_listen.host == "127.0.0.1");
}

TEST_CASE("deployment: a demo model is written on first use, then reused", "[manifest]") {
  auto dir = std::filesystem::temp_directory_path() / ("tokenhost-demo-" + std::to_string(fresh_rng("demo model dir")()));
  ::setenv("TOKENHOST_CACHE", dir.c_str(), 1);
  const std::string manifest = R"(
[models.d]
source = "demo"
preset = "stories260K"
type = "f16"
seed = 3
[engines.e]
model = "d"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.fifo" }
)";
  Deployment first = read_deployment("demo.toml", manifest);
  const auto file = dir / "demo-stories260K-f16-seed3.gguf";
  REQUIRE(first.models.at("d").path == file.string());
  REQUIRE(std::filesystem::is_regular_file(file));
  REQUIRE(first.models.at("d").spec.info.dim == model_shape_preset("stories260K").dim);
  REQUIRE(first.models.at("d").loaded->tokenizer.tokens.size() == model_shape_preset("stories260K").vocab_size);
  const auto written = std::filesystem::last_write_time(file);
  Deployment second = read_deployment("demo.toml", manifest);
  REQUIRE(std::filesystem::last_write_time(file) == written);  // not written again
  REQUIRE(second.models.at("d").spec.info.n_layers == first.models.at("d").spec.info.n_layers);
  CHECK_THAT(error_of("[models.d]\nsource = \"demo\"\ntype = \"q3\"\n"), Catch::Matchers::Contains("unknown weight type 'q3'"));
  CHECK_THAT(error_of("[models.d]\nsource = \"demo\"\npreset = \"7B\"\n"), Catch::Matchers::Contains("7B"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("deployment: the builtin stories260K is the tree's file, written once, served at context 512", "[manifest]") {
  auto dir = std::filesystem::temp_directory_path() / ("tokenhost-builtin-" + std::to_string(fresh_rng("builtin model dir")()));
  ::setenv("TOKENHOST_CACHE", dir.c_str(), 1);
  const std::string engine = "[engines.e]\nmodel = \"s\"\nattention = { plugin = \"attention.reference\" }\n"
                             "kvcache = { plugin = \"kvcache.paged\" }\nscheduler = { plugin = \"scheduler.fifo\" }\n";
  Deployment d = read_deployment("builtin.toml", "[models.s]\nsource = \"builtin\"\n" + engine);
  const auto file = dir / "builtin-stories260K.gguf";
  REQUIRE(d.models.at("s").path == file.string());
  auto bytes = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  CHECK(bytes(file) == bytes(std::string(TOKENHOST_SOURCE_DIR) + "/models/stories260K.gguf"));
  CHECK(d.models.at("s").spec.info.context_len == 512);  // the file says 2048
  CHECK(d.models.at("s").spec.info.vocab_size == 512);
  const auto written = std::filesystem::last_write_time(file);
  Deployment again = read_deployment("builtin.toml", "[models.s]\nsource = \"builtin\"\nname = \"stories260K\"\ncontext_len = 256\n" + engine);
  CHECK(std::filesystem::last_write_time(file) == written);
  CHECK(again.models.at("s").spec.info.context_len == 256);
  // A damaged copy in the cache is replaced.
  { std::ofstream(file, std::ios::binary | std::ios::trunc) << "not a model"; }
  read_deployment("builtin.toml", "[models.s]\nsource = \"builtin\"\n" + engine);
  CHECK(bytes(file).size() == bytes(std::string(TOKENHOST_SOURCE_DIR) + "/models/stories260K.gguf").size());
  CHECK_THAT(error_of("[models.s]\nsource = \"builtin\"\nname = \"gpt5\"\n"),
             Catch::Matchers::Contains("no builtin model 'gpt5' (this binary has: stories260K)"));
  CHECK_THAT(error_of("[models.s]\nsource = \"builtin\"\npath = \"x.gguf\"\n"), Catch::Matchers::Contains("unknown key 'path'"));
  // The embedded default serves it.
  Deployment def = read_deployment("<embedded manifests/default.toml>", embedded_default_manifest());
  CHECK(def.models.at("stories").source == "builtin");
  std::filesystem::remove_all(dir);
}

TEST_CASE("deployment: API keys and [limits] are read and checked", "[manifest]") {
  auto dir = std::filesystem::temp_directory_path() / ("tokenhost-keys-" + std::to_string(fresh_rng("keys dir")()));
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "keys.txt") << "# team keys\n\n  key-from-file-1  \nkey-from-file-2\n"; }
  Deployment d = read_deployment((dir / "d.toml").string(), "[server]\napi_keys = [\"inline-key-1\"]\napi_keys_file = \"keys.txt\"\n"
                                 "[limits]\ndefault_max_tokens = 64\nclient_max_sequences = 32\nclient_tokens_per_minute = 100000\n"
                                 "kv_admission_factor = 1.5\n" + kModel + kEngine);
  CHECK(d.server.api_keys == std::vector<std::string>{"inline-key-1", "key-from-file-1", "key-from-file-2"});
  CHECK(d.limits.default_max_tokens == 64);
  CHECK(d.limits.client_max_sequences == 32);
  CHECK(d.limits.client_tokens_per_minute == 100000);
  CHECK(d.limits.kv_admission_factor == 1.5);
  Deployment none = read_deployment("d.toml", kModel + kEngine);
  CHECK(none.server.api_keys.empty());
  CHECK(none.limits.default_max_tokens == GatewayLimits{}.default_max_tokens);
  CHECK(none.limits.kv_admission_factor == 0);
  CHECK_THAT(error_of("[server]\napi_keys = [\"short\"]\n" + kModel + kEngine), Catch::Matchers::Contains("at least 8 characters"));
  CHECK_THAT(error_of("[server]\napi_keys_file = \"/nonexistent/keys\"\n" + kModel + kEngine), Catch::Matchers::Contains("api_keys_file"));
  CHECK_THAT(error_of("[limits]\nkv_admission_factor = -1\n" + kModel + kEngine),
             Catch::Matchers::Contains("'kv_admission_factor' in [limits] must be a number from 0 (off) to 1000"));
  CHECK_THAT(error_of("[limits]\nkv_admission_factor = \"2\"\n" + kModel + kEngine), Catch::Matchers::Contains("found a string"));
  CHECK_THAT(error_of("[limits]\ndefault_max_tokens = 0\n" + kModel + kEngine), Catch::Matchers::Contains("default_max_tokens"));
  CHECK_THAT(error_of("[limits]\nclient_max_seqs = 3\n" + kModel + kEngine), Catch::Matchers::Contains("did you mean 'client_max_sequences'"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("deployment: a synthetic model larger than this machine's memory is refused before anything is allocated", "[manifest]") {
  // The reader's size is what make_synthetic_weights allocates, dense and MoE.
  for (const std::string shape : {"dim = 48\nn_heads = 6\nn_kv_heads = 2\nffn_dim = 72\nn_layers = 3\n",
                                  "dim = 32\nn_heads = 4\nn_experts = 5\nn_experts_used = 2\nvocab_size = 300\n"}) {
    const bool moe = shape.find("n_experts") != std::string::npos;
    Deployment d = read_deployment("d.toml", "[models.m]\n" + shape + kEngine + (moe ? "moe = { plugin = \"moe.topk\" }\n" : ""));
    const ModelSpec& spec = d.models.at("m").spec;
    CHECK(synthetic_weight_bytes(spec.info) == make_synthetic_weights(spec, 1)->bytes);
  }
  CHECK_THAT(error_of("[models.m]\ndim = 16384\nn_heads = 128\nn_layers = 256\nvocab_size = 1048576\n" + kEngine),
             Catch::Matchers::Matches("1:1: \\[models.m\\]: a synthetic model of this shape holds [0-9]+ MiB of f32 weights, more than "
                                      "this machine's memory \\([0-9]+ MiB\\)"));
}

TEST_CASE("deployment: TLS files for either port are read as pairs, relative to the manifest", "[manifest]") {
  auto dir = std::filesystem::temp_directory_path() / ("tokenhost-tls-" + std::to_string(fresh_rng("tls dir")()));
  std::filesystem::create_directories(dir / "certs");
  for (const char* f : {"certs/gw.crt", "certs/gw.key", "certs/admin.crt", "certs/admin.key"}) std::ofstream(dir / f) << "pem\n";
  Deployment d = read_deployment((dir / "d.toml").string(),
                                 "[server]\ntls_certificate = \"certs/gw.crt\"\ntls_private_key = \"certs/gw.key\"\n"
                                 "admin_tls_certificate = \"" + (dir / "certs/admin.crt").string() +
                                     "\"\nadmin_tls_private_key = \"certs/admin.key\"\n" + kModel + kEngine);
  CHECK(d.server.tls.enabled());
  CHECK(d.server.tls.certificate == (dir / "certs/gw.crt").string());
  CHECK(d.server.tls.private_key == (dir / "certs/gw.key").string());
  CHECK(d.server.admin_tls.certificate == (dir / "certs/admin.crt").string());
  CHECK(d.server.admin_tls.private_key == (dir / "certs/admin.key").string());
  Deployment plain = read_deployment("d.toml", kModel + kEngine);
  CHECK_FALSE(plain.server.tls.enabled());
  CHECK_FALSE(plain.server.admin_tls.enabled());
  CHECK(error_of("[server]\ntls_certificate = \"" + (dir / "certs/gw.crt").string() + "\"\n" + kModel + kEngine) ==
        "2:19: 'tls_certificate' in [server] needs 'tls_private_key' beside it (TLS takes a certificate and its key)");
  CHECK_THAT(error_of("[server]\nadmin_tls_private_key = \"/x.key\"\n" + kModel + kEngine),
             Catch::Matchers::Contains("'admin_tls_private_key' in [server] needs 'admin_tls_certificate' beside it"));
  CHECK(error_of("[server]\ntls_certificate = \"/nonexistent/a.crt\"\ntls_private_key = \"" + (dir / "certs/gw.key").string() +
                 "\"\n" + kModel + kEngine) == "2:19: 'tls_certificate' in [server]: /nonexistent/a.crt is not a file");
  CHECK_THAT(error_of("[server]\ntls_certificate = \"" + dir.string() + "\"\ntls_private_key = \"" + (dir / "certs/gw.key").string() +
                      "\"\n" + kModel + kEngine),
             Catch::Matchers::Contains("is not a file"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("deployment: mistakes are reported at file:line:column with what was expected", "[manifest]") {
  CHECK(error_of("[server]\nlisten = \"127.0.0.1:8080\"\nlistn = \"x\"\n" + kModel + kEngine) ==
        "3:1: unknown key 'listn' in [server] (did you mean 'listen'?)");
  CHECK(error_of("[server]\nlisten = 8080\n" + kModel + kEngine) ==
        "2:10: 'listen' in [server] must be a string, found an integer");
  CHECK(error_of("[server]\nlisten = \"localhost\"\n" + kModel + kEngine) ==
        "2:10: 'listen' in [server] must be \"host:port\" (port 0-65535), found \"localhost\"");
  CHECK(error_of("[server]\nlog_level = \"verbose\"\n" + kModel + kEngine).rfind("2:13: unknown log_level 'verbose'", 0) == 0);
  CHECK(error_of(kModel + "n_layer = 3\n" + kEngine) == "4:1: unknown key 'n_layer' in [models.m] (did you mean 'n_layers'?)");
  CHECK(error_of(kModel + "n_kv_heads = 3\n" + kEngine).find("n_heads 4 is not a multiple of n_kv_heads 3") != std::string::npos);
  CHECK(error_of("[models.m]\ndim = 4\n").find("'dim' in [models.m] = 4 is out of range [8, 16384]") != std::string::npos);
  // A CUDA device is refused until the CUDA backend computes, at its line, saying so.
  CHECK(error_of(kModel + kEngine + "device = \"cuda:0\"\n") ==
        "9:10: device 'cuda:0' in [engines.e]: the CUDA backend does not compute yet (this host runs engines on the CPU "
        "only); use device = \"cpu\"");
  CHECK(error_of(kModel + R"([engines.e]
model = "n"
)") == "5:9: engine 'e' names unknown model 'n' (did you mean 'm'?)");
  CHECK(error_of(kModel + R"([engines.e]
model = "m"
attention = { plugin = "attention.refrence" }
)").rfind("6:24: unknown plugin 'attention.refrence' in [engines.e.attention] (did you mean 'attention.reference'?)", 0) == 0);
  CHECK(error_of(kModel + R"([engines.e]
model = "m"
attention = { plugin = "scheduler.fifo" }
)") == "6:24: plugin 'scheduler.fifo' is a scheduler plugin; [engines.e.attention] needs a attention plugin");
  CHECK(error_of(kModel + R"([engines.e]
model = "m"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { block_sise = 8 } }
)") == "7:50: unknown config key 'block_sise' for plugin kvcache.paged in [engines.e.kvcache].config (did you mean 'block_size'?)");
  CHECK(error_of(kModel + R"([engines.e]
model = "m"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { n_blocks = 0 } }
)") == "7:61: 'n_blocks' in [engines.e.kvcache].config is out of range [1, 2147483647]");
  CHECK(error_of(kModel + R"([engines.e]
model = "m"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged", config = { block_size = "big" } }
)") == "7:63: 'block_size' in [engines.e.kvcache].config must be int, found a string");
  CHECK(error_of(kModel + R"([engines.e]
model = "m"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged" }
)") == "4:1: [engines.e] has no [engines.e.scheduler] slot (a scheduler plugin is required)");
  CHECK(error_of("[server\nlisten = 1\n").rfind("1:8: TOML syntax error", 0) == 0);
  CHECK(error_of(kEngine).find("missing table 'models'") != std::string::npos);
  CHECK(error_of(kModel + kEngine + "[routr]\n") == "9:2: unknown key 'routr' in the deployment manifest (did you mean 'router'?)");
}

TEST_CASE("deployment: a manifest that cannot be opened names the file", "[manifest]") {
  REQUIRE_THROWS_WITH(read_deployment_file("/nonexistent/dir/x.toml"), "/nonexistent/dir/x.toml:1:1: cannot open the file");
}

TEST_CASE("deployment: [experiments] tables are read and their mistakes located", "[manifest][experiments]") {
  const std::string engines = kEngine + R"([engines.f]
model = "m"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.static" }
)";
  // Lines 1-3 the model, 4-8 engine e, 9-13 engine f; the experiment from line 14.
  auto experiment = [&](const std::string& body) { return kModel + engines + "[experiments.x]\n" + body; };
  const std::string arms = "arms = [{ name = \"a\", engine = \"e\", percent = 50 },\n"
                           "        { name = \"b\", engine = \"f\", percent = 50, holdback_classes = [\"batch\"] }]\n";
  auto d = read_deployment("ok.toml", experiment("sticky_key = \"user\"\n" + arms));
  REQUIRE(d.experiments.size() == 1);
  REQUIRE(d.experiments[0].name == "x");
  REQUIRE(d.experiments[0].sticky_key == experiments::StickyKey::user);
  REQUIRE(d.experiments[0].arms[1].holdback_classes == std::vector<std::string>{"batch"});

  CHECK(error_of(experiment("stiky_key = \"user\"\n" + arms)) ==
        "15:1: [experiments.x] stiky_key: unknown field 'stiky_key' (did you mean 'sticky_key'?)");
  CHECK(error_of(experiment("sticky_key = \"cookie\"\n" + arms)).rfind("15:14: [experiments.x] sticky_key: unknown sticky_key 'cookie'", 0) == 0);
  CHECK(error_of(experiment("arms = [{ name = \"a\", engine = \"e\", percent = 40 },\n"
                            "        { name = \"b\", engine = \"f\", percent = 50 }]\n")) ==
        "15:8: [experiments.x] arms: the arms' percents sum to 90; they must sum to 100");
  CHECK(error_of(experiment("arms = [{ name = \"a\", engine = \"e\", percent = 50 },\n"
                            "        { name = \"b\", engine = \"g\", percent = 50 }]\n")) ==
        "16:32: [experiments.x] arms[1].engine: arm 'b': no engine 'g' (did you mean 'e'?)");
  CHECK(error_of(experiment("arms = [{ name = \"a\", engine = \"e\", percent = 50.5 },\n"
                            "        { name = \"b\", engine = \"f\", percent = 49.5 }]\n")) ==
        "15:47: [experiments.x] arms[0].percent: 'arms[0].percent' must be an integer 0-100, got number");
  // Two experiments on one model cannot run together.
  CHECK(error_of(experiment(arms) + "[experiments.y]\n" + arms).find("is an arm of running experiment 'x'") != std::string::npos);
}


TEST_CASE("deployment: an engine's kv_dtype (f16 unless it says f32) is its model's kv_dtype for its plugins",
          "[manifest]") {
  const Deployment d = read_deployment("kv.toml", kModel + kEngine + R"([engines.g]
model = "m"
kv_dtype = "f32"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.fifo" }
)");
  CHECK(d.engines.at("e").kv_dtype == TH_DTYPE_F16);
  CHECK(d.engines.at("g").kv_dtype == TH_DTYPE_F32);
  CHECK(engine_model(d, d.engines.at("e")).info.kv_dtype == TH_DTYPE_F16);
  CHECK(engine_model(d, d.engines.at("g")).info.kv_dtype == TH_DTYPE_F32);
  CHECK(engine_model(d, d.engines.at("g")).info.dim == d.models.at("m").spec.info.dim);
  CHECK(error_of(kModel + "[engines.e]\nmodel = \"m\"\nkv_dtype = \"f166\"\n") ==
        "6:12: kv_dtype 'f166' in [engines.e] is not one of f32, f16, q8_0 (did you mean 'f16'?)");
  CHECK(error_of(kModel + "[engines.e]\nmodel = \"m\"\nkv_dtype = 16\n").rfind("6:12: 'kv_dtype' in [engines.e] must be a string", 0) == 0);
}

TEST_CASE("deployment: [partitions] give engines compute pools of their own, and their mistakes are located", "[manifest]") {
  // Lines 1-3 the model, 4-7 the partitions, 8 on the engine.
  const std::string parts = "[partitions.prefill]\ncores = [0]\n[partitions.decode]\nthreads = 2\n";
  auto engine = [](const std::string& partition) {
    return "[engines.e]\nmodel = \"m\"\npartition = \"" + partition +
           "\"\nattention = { plugin = \"attention.reference\" }\nkvcache = { plugin = \"kvcache.paged\" }\n"
           "scheduler = { plugin = \"scheduler.fifo\" }\n";
  };
  const Deployment d = read_deployment("p.toml", kModel + parts + engine("decode"));
  REQUIRE(d.partitions.size() == 2);
  CHECK(d.partitions.at("prefill").cores == std::vector<int>{0});
  CHECK(d.partitions.at("prefill").threads == 1);  // threads left out: one per listed core
  CHECK(d.partitions.at("decode").threads == 2);
  CHECK(d.partitions.at("decode").cores.empty());
  CHECK(d.engines.at("e").partition == "decode");
  CHECK(describe(d.partitions.at("prefill")) == "prefill: 1 thread on cores 0");
  CHECK(describe(d.partitions.at("decode")) == "decode: 2 threads");

  const std::string e = engine("decode");
  CHECK(error_of(kModel + "[partitions.p]\ncores = [0, 0]\n" + e) == "5:13: core 0 is listed twice in [partitions.p]");
  CHECK(error_of(kModel + "[partitions.p]\ncores = [99999]\n" + e).rfind("5:10: core 99999 in [partitions.p] is not one of this machine's (0 to ", 0) == 0);
  CHECK(error_of(kModel + "[partitions.p]\ncores = []\n" + e) == "5:9: cores in [partitions.p] must be a non-empty array of core numbers");
  CHECK(error_of(kModel + "[partitions.p]\ncores = [\"a\"]\n" + e).rfind("5:10: cores in [partitions.p] must hold integers", 0) == 0);
  CHECK(error_of(kModel + "[partitions.p]\nthreads = 0\n" + e).rfind("5:11: ", 0) == 0);
  CHECK(error_of(kModel + "[partitions.p]\nthread = 2\n" + e).find("unknown key 'thread' in [partitions.p] (did you mean 'threads'?)") != std::string::npos);
  CHECK(error_of(kModel + "[partitions.p]\n" + e).find("[partitions.p] needs threads (how many compute threads) or cores (which cores)") != std::string::npos);
  CHECK(error_of(kModel + parts + engine("decod")) == "10:13: engine 'e' names unknown partition 'decod' (did you mean 'decode'?)");
  CHECK(error_of(kModel + engine("decode")) == "6:13: engine 'e' names unknown partition 'decode' (the manifest declares no [partitions])");
  // An engine's role in prefill/decode disaggregation: both unless it says prefill or decode.
  CHECK(d.engines.at("e").role == TH_ROLE_BOTH);
  const std::string roled = kModel + parts + "[engines.e]\nmodel = \"m\"\nrole = \"prefil\"\n" + e.substr(e.find("attention"));
  CHECK(error_of(roled) == "10:8: role 'prefil' in [engines.e] is not one of both, prefill, decode (did you mean 'prefill'?)");
  std::string good = roled;
  good.replace(good.find("prefil\""), 7, "prefill\"");
  CHECK(read_deployment("r.toml", good).engines.at("e").role == TH_ROLE_PREFILL);
}

TEST_CASE("deployment: an engine's max_draft and draft_policy bound and steer its speculation", "[manifest]") {
  const Deployment d = read_deployment("spec.toml", kModel + kEngine + R"([engines.g]
model = "m"
max_draft = 8
draft_policy = "fixed"
attention = { plugin = "attention.reference" }
kvcache = { plugin = "kvcache.paged" }
scheduler = { plugin = "scheduler.fifo" }
)");
  CHECK(d.engines.at("e").max_draft == kDefaultMaxDraft);
  CHECK(d.engines.at("e").draft_policy == DraftPolicy::adaptive);
  CHECK(d.engines.at("g").max_draft == 8);
  CHECK(d.engines.at("g").draft_policy == DraftPolicy::fixed);
  CHECK(error_of(kModel + "[engines.e]\nmodel = \"m\"\ndraft_policy = \"adaptiv\"\n") ==
        "6:16: draft_policy 'adaptiv' in [engines.e] is not one of fixed, adaptive (did you mean 'adaptive'?)");
  CHECK(error_of(kModel + "[engines.e]\nmodel = \"m\"\nmax_draft = 17\n") == "6:13: 'max_draft' in [engines.e] = 17 is out of range [1, 16]");
  CHECK(error_of(kModel + "[engines.e]\nmodel = \"m\"\nmax_draft = 0\n") == "6:13: 'max_draft' in [engines.e] = 0 is out of range [1, 16]");
}

TEST_CASE("deployment: a model's pack_weights becomes how its engines' backend places it", "[manifest]") {
  // The packing itself is the CPU backend's (tests/host/backends/test_backends.cpp): the manifest only
  // carries the choice, and loading the file packs nothing.
  MakeModelOptions make;
  make.path = (std::filesystem::temp_directory_path() /
               ("tokenhost-pack-" + std::to_string(fresh_rng("pack model")()) + ".gguf")).string();
  make.shape.ffn_dim = 192;  // Q8_0 rows: multiples of 32
  make.type = TH_DTYPE_Q8_0;
  make_model(make);
  auto read = [&](const std::string& pack) {
    Deployment d = read_deployment("pack.toml", "[models.d]\nsource = \"gguf\"\npath = \"" + make.path + "\"\n" + pack +
                                                    "[engines.e]\nmodel = \"d\"\n" + kEngine.substr(kEngine.find("attention")));
    REQUIRE(d.models.at("d").loaded->weights->packed_bytes == 0);
    return d.models.at("d").placement.pack;
  };
  REQUIRE(read("") == true);
  REQUIRE(read("pack_weights = true\n") == true);
  REQUIRE(read("pack_weights = false\n") == false);
  REQUIRE_THAT(error_of("[models.m]\nsource = \"gguf\"\npath = \"" + make.path + "\"\npack_weights = 1\n" + kEngine),
               Catch::Matchers::Equals("4:16: 'pack_weights' in [models.m] must be a boolean, found an integer"));
  std::filesystem::remove(make.path);
}

TEST_CASE("deployment: a key left out takes the default the README documents", "[manifest]") {
  // Only what is required: every other key takes its default.
  Deployment d = read_deployment("defaults.toml", "[models.m]\n" + kEngine);
  const th_model_info& m = d.models.at("m").spec.info;
  const EngineDecl& e = d.engines.at("e");
  // The README's reference manifest shows these values for the keys it marks as defaults.
  std::ifstream readme_file(std::string(TOKENHOST_SOURCE_DIR) + "/README.md");
  const std::string readme((std::istreambuf_iterator<char>(readme_file)), std::istreambuf_iterator<char>());
  const std::pair<std::string, uint64_t> documented[] = {
      {"dim = ", m.dim},
      {"n_layers = ", m.n_layers},
      {"n_heads = ", m.n_heads},
      {"vocab_size = ", m.vocab_size},
      {"context_len = ", m.context_len},
      {"max_step_tokens = ", e.max_step_tokens},
      {"max_step_seqs = ", e.max_step_seqs},
      {"http_threads = ", uint64_t(d.server.http_threads)},
  };
  for (const auto& [key, effective] : documented) {
    INFO(key << effective);
    REQUIRE(readme.find("\n" + key + std::to_string(effective)) != std::string::npos);
  }
  REQUIRE(m.dim == 64);
  REQUIRE(m.ffn_dim == 4 * m.dim);
  REQUIRE(m.n_kv_heads == m.n_heads);
  REQUIRE(e.max_step_seqs == 64);
  REQUIRE(e.max_step_tokens == 512);
  REQUIRE(e.kv_dtype == TH_DTYPE_F16);
  REQUIRE(e.device == "cpu");
  REQUIRE(d.server.log_level == "info");
}


TEST_CASE("deployment: an MoE engine's expert_partitions, expert_replicas and rebalance_steps, and their mistakes located", "[manifest][moe]") {
  // Lines 1-5 the MoE model, 6-9 the partitions, 10 on the engine.
  const std::string model = "[models.m]\ndim = 32\nn_heads = 4\nn_experts = 4\nn_experts_used = 2\n";
  const std::string parts = "[partitions.a]\nthreads = 1\n[partitions.b]\nthreads = 1\n";
  auto engine = [](const std::string& keys) {
    return "[engines.e]\nmodel = \"m\"\n" + keys +
           "\nattention = { plugin = \"attention.reference\" }\nkvcache = { plugin = \"kvcache.paged\" }\n"
           "scheduler = { plugin = \"scheduler.fifo\" }\nmoe = { plugin = \"moe.eplb\" }\n";
  };
  const Deployment d = read_deployment("x.toml", model + parts + engine("expert_partitions = [\"a\", \"b\"]\nexpert_replicas = 2"));
  const ExpertParallelDecl& x = d.engines.at("e").experts;
  CHECK(x.partitions == std::vector<std::string>{"a", "b"});
  CHECK(x.replicas == 2);
  CHECK(x.rebalance_steps == 100);  // the default
  CHECK(x.slots_per_partition(4) == 3);  // 4 experts and 2 replicas over 2 partitions
  CHECK(read_deployment("x.toml", model + parts + engine("")).engines.at("e").experts.partitions.empty());

  CHECK(error_of(model + parts + engine("expert_partitions = [\"a\"]")) ==
        "12:21: expert_partitions in [engines.e] must list two [partitions] names at least");
  CHECK(error_of(model + parts + engine("expert_partitions = [\"a\", \"c\"]")) ==
        "12:27: expert_partitions in [engines.e] names unknown partition 'c' (did you mean 'a'?)");
  CHECK(error_of(model + parts + engine("expert_partitions = [\"a\", \"a\"]")) ==
        "12:27: partition 'a' is listed twice in expert_partitions of [engines.e]");
  CHECK(error_of(model + parts + engine("expert_partitions = [\"a\", 2]")).rfind("12:27: expert_partitions in [engines.e] must hold partition names", 0) == 0);
  CHECK(error_of(model + parts + engine("rebalance_steps = 5")) ==
        "12:19: rebalance_steps in [engines.e] applies to expert_partitions: set it too");
  CHECK(error_of(model + parts + engine("expert_partitions = [\"a\", \"b\"]\nexpert_replicas = -1")).rfind("13:19: ", 0) == 0);
  const std::string dense = "[models.m]\ndim = 32\nn_heads = 4\n[partitions.a]\nthreads = 1\n[partitions.b]\nthreads = 1\n"
                            "[engines.e]\nmodel = \"m\"\nexpert_partitions = [\"a\", \"b\"]\n" + kEngine.substr(kEngine.find("attention"));
  CHECK(error_of(dense) == "10:21: expert_partitions in [engines.e]: the engine's model is dense (no experts to spread)");
}

}  // namespace manifest_deployment_tests
