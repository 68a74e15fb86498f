// tokenhost: the command line. serve runs a deployment; check validates one; plugins lists and
// inspects the plugins the host can load; bench load-tests an OpenAI-compatible server; admin
// operates a running one.
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "cli/admin_command.hpp"
#include "cli/bench_command.hpp"
#include "cli/generate_command.hpp"
#include "cli/perplexity_command.hpp"
#include "cli/make_model_command.hpp"
#include "cluster/node_identity.hpp"
#include "routing/route_keys.hpp"
#include "cli/quantize_command.hpp"
#include "cli/tokenize_command.hpp"
#include "http/http_servers.hpp"
#include "http/http_tls.hpp"
#include "manifest/deployment.hpp"
#include "plugin/kind.hpp"
#include "plugin/library.hpp"
#include "server/server.hpp"
#include "cli/serve_flags.hpp"
#include "base/allocator_tuning.hpp"
#include "base/compute_pool.hpp"
#include "util/text.hpp"

namespace {

using namespace tokenhost;

Deployment load_deployment(const std::string& path) {
  if (path.empty()) return read_deployment("<embedded manifests/default.toml>", embedded_default_manifest());
  return read_deployment_file(path);
}

// Loads each plugin the deployment names and asks it whether it can serve its engine.
std::vector<std::string> check_plugins(const Deployment& d) {
  std::vector<std::string> problems;
  auto check_slot = [&](const std::string& engine, const ModelSpec& model, const std::string& slot, const SlotDecl& s) {
    try {
      auto lib = d.catalog->load(s.manifest);
      InstanceSpec spec;
      spec.engine = engine;
      spec.slot = slot;
      spec.model = model;
      spec.device = devices().front();
      spec.config = s.config;
      for (auto& r : check_plugin(*lib, spec)) problems.push_back(engine + "." + slot + " (" + s.plugin + "): " + r);
    } catch (const std::exception& e) {
      problems.push_back(engine + "." + slot + ": " + e.what());
    }
  };
  for (const auto& [name, e] : d.engines) {
    for (const auto& [slot, s] : e.slots) check_slot(name, engine_model(d, e), slot, s);
    for (const auto& [slot, layers] : e.stacks)
      for (const auto& s : layers) check_slot(name, engine_model(d, e), slot, s);
  }
  const std::string router = slot_of(TH_KIND_ROUTER).name();  // the router's instance is labelled by its slot
  check_slot(router, d.models.begin()->second.spec, router, d.router);
  return problems;
}

// Loads each port's certificate and key as serve would (no plugin code runs).
std::vector<std::string> check_tls(const Deployment& d) {
  std::vector<std::string> problems;
  for (const auto& [port, tls] : {std::pair{"the gateway", &d.server.tls}, std::pair{"the admin API", &d.server.admin_tls}}) {
    if (!tls->enabled()) continue;
    try {
      load_server_tls(tls->certificate, tls->private_key);
    } catch (const std::exception& e) {
      problems.push_back(std::string("TLS of ") + port + ": " + e.what());
    }
  }
  return problems;
}

// This executable's path: the program that vets plugin libraries in a process of their own.
std::string self_executable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// Builds the deployment's engines as serve would (weights placed, every plugin instance created with
// its config, draft sessions, the router), then stops them: a create() that fails is found here, with
// serve's message, not first by serve. No port is opened.
std::vector<std::string> check_create(Deployment d) {
  try {
    Server server(std::move(d));
    server.stop();
    return {};
  } catch (const std::exception& e) {
    return {std::string("creating the engines as serve would: ") + e.what()};
  }
}

// Every error of a manifest the reader can find, not the first alone: after each, the line it names is
// set aside (made a comment, the line count kept) and the manifest read again. Stops at an error on a
// table's header (setting it aside would move its keys into the table above), at one it already saw,
// when setting a line aside leaves TOML that does not parse, and after 20.
std::vector<std::string> manifest_errors(const std::string& path) {
  const std::string label = path.empty() ? "<embedded manifests/default.toml>" : path;
  std::vector<std::string> lines;
  {
    std::istringstream in(path.empty() ? std::string(embedded_default_manifest()) : TomlReader::read_text(path));
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  auto text = [&] {
    std::string t;
    for (const auto& l : lines) t += l + "\n";
    return t;
  };
  std::vector<std::string> errors;
  std::set<uint32_t> set_aside;
  for (int round = 0; round < 20; ++round) {
    try {
      read_deployment(label, text());
      break;
    } catch (const ManifestError& e) {
      const bool header = e.line() >= 1 && e.line() <= lines.size() && lines[e.line() - 1].find_first_not_of(" \t") != std::string::npos &&
                          lines[e.line() - 1][lines[e.line() - 1].find_first_not_of(" \t")] == '[';
      if (round > 0 && (header || set_aside.count(e.line()))) break;  // likely what setting a line aside caused
      errors.push_back(e.what());
      if (header || e.line() < 1 || e.line() > lines.size()) break;
      set_aside.insert(e.line());
      lines[e.line() - 1] = "# " + lines[e.line() - 1];
      try {
        (void)toml::parse(text(), label);
      } catch (const toml::parse_error&) {
        break;
      }
    }
  }
  return errors;
}

int run_check(const std::string& path, bool load) {
  try {
    Deployment d = load_deployment(path);  // read once when it is valid; the errors' list only when it is not
    const std::string file = d.file;
    const size_t n_models = d.models.size(), n_engines = d.engines.size();
    std::vector<std::string> problems = check_tls(d);
    if (load) {
      for (auto& p : check_plugins(d)) problems.push_back(std::move(p));
      // Opened as serve opens them: vetted in a child process first (README: Security model).
      PluginLibrary::set_vetting_program(self_executable());
      if (problems.empty())
        for (auto& p : check_create(std::move(d))) problems.push_back(std::move(p));
    }
    if (!problems.empty()) {
      for (const auto& p : problems) std::cerr << (path.empty() ? file : path) << ": " << p << "\n";
      return 1;
    }
    std::cout << file << ": OK (" << n_models << " model(s), " << n_engines << " engine(s)"
              << (load ? ", every plugin loaded, accepts its engine and was created with its config" : "") << ")\n";
    return 0;
  } catch (const ManifestError& e) {
    auto errors = manifest_errors(path);  // the first is the one caught, the others after it
    if (errors.empty()) errors.push_back(e.what());
    for (const auto& e : errors) std::cerr << e << "\n";
    if (errors.size() > 1) std::cerr << errors.size() << " errors\n";
    return 1;
  }
}

std::atomic<int> g_signal{0};
extern "C" void on_signal(int sig) { g_signal = sig; }

int run_serve(const std::string& path, const ServeFlags& flags) {
  std::vector<std::string> notes;
  const std::string manifest = effective_manifest(path, flags, notes);
  for (const auto& n : notes) spdlog::warn("{}", n);
  const std::string label = (path.empty() ? std::string("<embedded manifests/default.toml>") : path) + " with serve's flags";
  Deployment d = read_deployment(label, manifest);  // the flags' values checked as the file's are
  if (flags.print_manifest) {
    std::cout << manifest;
    return 0;
  }
  // Every library the server opens is opened first by `tokenhost vet-plugin` in a child process: one the
  // host refuses runs none of its code in the server (README: Security model).
  PluginLibrary::set_vetting_program(self_executable());
  spdlog::set_level(spdlog::level::from_str(d.server.log_level));  // the manifest's, or --log-level written into it
  if (spdlog::get_level() != spdlog::level::from_str(d.server.log_level)) spdlog::set_level(spdlog::level::info);
  if (d.server.compute_threads > 0 && !set_process_compute_threads(d.server.compute_threads))
    spdlog::warn("[server] compute_threads = {} comes too late: the compute pool already runs", d.server.compute_threads);
  spdlog::info("tokenhost {} starting with {}: {} compute threads for the engines without a partition", TOKENHOST_VERSION, d.file,
               process_compute_pool().threads());
  for (const auto& e : d.catalog->scan_errors()) spdlog::warn("plugin manifest skipped: {}", e);
  Server server(std::move(d));
  HttpServers http(server);
  http.start();
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  while (g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  spdlog::info("received signal {}: draining", int(g_signal));
  server.drain();
  http.drain();  // the answers of requests that ended while draining reach their clients
  http.stop();
  server.stop();
  return 0;
}

int run_plugins(bool inspect, const std::string& id, const std::vector<std::string>& extra_paths, bool as_json) {
  std::vector<std::string> paths = extra_paths;
  for (auto& p : default_plugin_paths()) paths.push_back(p);
  PluginCatalog catalog(paths);
  catalog.scan();
  if (!inspect) {
    for (const auto& m : catalog.all())
      std::cout << m.id << "  " << m.version << "  (" << kind_name(m.kind) << ", ABI " << m.abi_major << "." << m.abi_minor
                << ")  " << m.description << "\n";
    for (const auto& e : catalog.scan_errors()) std::cerr << "skipped: " << e << "\n";
    if (catalog.all().empty()) std::cerr << "no plugins found in " << join(paths, ":") << "\n";
    return 0;
  }
  auto m = catalog.find(id);
  if (!m) {
    std::vector<std::string> ids;
    for (const auto& k : catalog.all()) ids.push_back(k.id);
    std::cerr << "no plugin '" << id << "'" << suggestion(id, ids) << "\n";
    // A manifest that did not read may be the one asked for: say why each such one was skipped.
    const std::string name = id.substr(id.find('.') + 1);
    size_t others = 0;
    for (const auto& e : catalog.scan_errors()) {
      if (e.find(id) != std::string::npos || e.find("/" + name + "/") != std::string::npos) std::cerr << "skipped: " << e << "\n";
      else ++others;
    }
    if (others > 0) std::cerr << others << " other plugin manifest(s) were skipped: `tokenhost plugins list` says why\n";
    return 1;
  }
  std::string loaded = "yes";
  try {
    auto lib = catalog.load(*m);
    loaded = "yes (library " + lib->version() + ", ABI " + std::to_string(lib->abi_major()) + "." + std::to_string(lib->abi_minor()) + ")";
  } catch (const PluginError& e) {
    loaded = std::string("NO: ") + e.what();
  }
  if (as_json) {
    std::cout << nlohmann::json{{"id", m->id}, {"version", m->version}, {"kind", kind_name(m->kind)}, {"library", m->library},
                                {"loads", loaded}, {"config", config_params_json(*m)}}.dump(2) << "\n";
    return loaded.rfind("yes", 0) == 0 ? 0 : 1;
  }
  std::cout << m->id << " " << m->version << "\n  kind: " << kind_name(m->kind) << "\n  ABI: " << m->abi_major << "."
            << m->abi_minor << "\n  manifest: " << m->file << "\n  library: " << m->library << "\n  devices: "
            << join(m->devices, ", ") << "\n  loads: " << loaded << "\n  " << m->description << "\n";
  if (!m->params.empty()) std::cout << "  config:\n";
  for (const auto& p : m->params) std::cout << "    " << config_param_text(*m, p) << "\n";
  return loaded.rfind("yes", 0) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  tokenhost::tune_allocator_for_serving();
  CLI::App app{"tokenhost: an LLM inference server whose techniques are plugins.\n"
               "Run `tokenhost <command> --help` for each command."};
  app.set_version_flag("--version", std::string("tokenhost ") + TOKENHOST_VERSION + " (plugin ABI " +
                                        std::to_string(TH_ABI_VERSION_MAJOR) + "." + std::to_string(TH_ABI_VERSION_MINOR) + ")");
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));

  auto* serve = app.add_subcommand("serve", "Run a deployment: the inference gateway and the admin API.\n"
                                            "Without MANIFEST it runs the embedded manifests/default.toml.");
  std::string serve_manifest;
  serve->add_option("manifest", serve_manifest, "Deployment manifest (TOML)")->check(CLI::ExistingFile);
  ServeFlags serve_flags;
  add_serve_flags(*serve, serve_flags);
  serve->fallthrough();  // `serve --log-level warn` as well as `tokenhost --log-level warn serve`

  auto* check = app.add_subcommand("check", "Validate a deployment manifest without starting anything; errors name "
                                            "file:line:column. Exits 0 when it is valid.");
  std::string check_manifest;
  bool no_load = false;
  check->add_option("manifest", check_manifest, "Deployment manifest (TOML); none = the embedded default");
  check->add_flag("--no-load", no_load,
                  "Do not load the plugin libraries: skip asking them whether they accept their engine (check()) and creating "
                  "each instance as serve would (create(), on throwaway engines)");

  auto* plugins = app.add_subcommand("plugins", "List or inspect the plugins found in the plugin search paths");
  plugins->require_subcommand(1);
  std::vector<std::string> plugin_paths;
  plugins->add_option("--plugin-path", plugin_paths, "Extra directory to search (before $TOKENHOST_PLUGIN_PATH and the defaults); repeatable")->allow_extra_args(false);
  auto* list = plugins->add_subcommand("list", "One line per plugin: id, version, kind, ABI, description");
  auto* inspect = plugins->add_subcommand("inspect", "Everything about one plugin, and whether its library loads");
  std::string inspect_id;
  bool as_json = false;
  inspect->add_option("id", inspect_id, "Plugin id, e.g. scheduler.fifo")->required();
  inspect->add_flag("--json", as_json, "Print JSON");
  list->fallthrough();
  inspect->fallthrough();

  GenerateOptions generate_options;
  auto* generate = add_generate_command(app, generate_options);
  MakeModelCommand make_model_options;
  auto* make_model_cmd = add_make_model_command(app, make_model_options);
  QuantizeOptions quantize_options;
  auto* quantize = add_quantize_command(app, quantize_options);
  TokenizeOptions tokenize_options;
  auto* tokenize = add_tokenize_command(app, tokenize_options);
  PerplexityCommand perplexity_options;
  auto* perplexity = add_perplexity_command(app, perplexity_options);
  BenchOptions bench_options;
  BenchCompareOptions bench_compare_options;
  CLI::App* bench_compare = nullptr;
  auto* bench = add_bench_command(app, bench_options, bench_compare_options, &bench_compare);
  AdminOptions admin_options;
  auto* admin = add_admin_command(app, admin_options);

  auto* key_id = app.add_subcommand("key-id", "Print the payer id router plugins see for an API key (th_route_request.payer: "
                                             "\"key-\" and 16 hex digits), to configure a per-key budget without writing the key "
                                             "into a plugin's config. Without KEY, reads it from the first line of stdin (kept out "
                                             "of the shell's history).");
  std::string key_id_key;
  key_id->add_option("key", key_id_key, "The API key");

  auto* cluster = app.add_subcommand("cluster", "Certificates for a deployment of several nodes ([cluster] in manifests)");
  cluster->require_subcommand(1);
  auto* cluster_init = cluster->add_subcommand(
      "init", "Write a cluster's CA (ca.pem, ca.key) and a certificate and key per node (NODE.pem, NODE.key; keys mode 0600) "
              "into DIR, for mutual TLS between its nodes. Run again with new names to add nodes: the CA in DIR is reused and "
              "existing nodes are never overwritten. Keep ca.key off the nodes.");
  std::string cluster_dir;
  std::vector<std::string> cluster_nodes;
  cluster_init->add_option("dir", cluster_dir, "The folder to write (created mode 0700)")->required();
  cluster_init->add_option("--nodes", cluster_nodes, "The node names (each a certificate's CN and a manifest's [cluster] node)")
      ->required()
      ->delimiter(',');

  // Internal: opens and validates one plugin library in this process and says why it is refused (the
  // server runs it before loading a library itself). Not listed in --help.
  auto* vet = app.add_subcommand("vet-plugin", "")->group("");
  std::string vet_manifest, vet_library;
  vet->add_option("manifest", vet_manifest)->required();
  vet->add_option("library", vet_library)->required();

  // llama-server's multi-letter short flags, as CLI11 takes their long names.
  std::vector<std::string> args(argv, argv + argc);
  for (auto& a : args) {
    if (a == "-ngl") a = "--n-gpu-layers";
    if (a == "-np") a = "--parallel";
  }
  std::vector<const char*> arg_ptrs;
  for (const auto& a : args) arg_ptrs.push_back(a.c_str());
  if (const std::string unknown = unknown_serve_flag(app, *serve, argc, arg_ptrs.data()); !unknown.empty()) {
    std::cerr << "tokenhost: " << unknown << "\n";
    return 2;
  }
  CLI11_PARSE(app, argc, arg_ptrs.data());
  if (*vet) {
    try {
      PluginLibrary::vet_here(vet_manifest, vet_library);
      return 0;
    } catch (const std::exception& e) {
      std::cout << e.what() << std::endl;
      return 1;
    }
  }
  // The log goes to stderr: stdout is the command's output (generate's text, inspect --json, ...).
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  spdlog::set_level(spdlog::level::from_str(log_level));
  try {
    if (*serve) {
      if (app.get_option("--log-level")->count() > 0) serve_flags.log_level = log_level;  // beats the manifest
      return run_serve(serve_manifest, serve_flags);
    }
    if (*check) return run_check(check_manifest, !no_load);
    if (*generate) return run_generate(generate_options);
    if (*make_model_cmd) return run_make_model(make_model_options);
    if (*quantize) return run_quantize(quantize_options);
    if (*bench) return *bench_compare ? run_bench_compare(bench_compare_options) : run_bench(bench_options);
    if (*tokenize) return run_tokenize(tokenize_options);
    if (*perplexity) return run_perplexity_command(perplexity_options);
    if (*admin) return run_admin(admin_options);
    if (*key_id) {
      if (key_id_key.empty()) std::getline(std::cin, key_id_key);
      if (key_id_key.empty()) throw std::runtime_error("key-id: no API key given (as an argument or on stdin)");
      std::cout << routing::payer_id(key_id_key) << "\n";
      return 0;
    }
    if (*plugins) return run_plugins(inspect->parsed(), inspect_id, plugin_paths, as_json);
    if (*cluster_init) {
      cluster::InitReport r = cluster::init_cluster(cluster_dir, cluster_nodes);
      for (const auto& f : r.written) std::cout << "wrote " << f << "\n";
      return 0;
    }
  } catch (const ManifestError& e) {
    std::cerr << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tokenhost: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
