#include "cli/serve_flags.hpp"

#include <filesystem>
#include <sstream>
#include <stdexcept>

#include <toml++/toml.h>

#include "manifest/deployment.hpp"
#include "util/text.hpp"
#include "util/toml_reader.hpp"

namespace tokenhost {
namespace {

// t[key] as a table, made (empty) when absent. Throws when it is something else (the reader would too).
toml::table& table_at(toml::table& t, const std::string& key, const std::string& where) {
  if (toml::node* n = t.get(key)) {
    if (toml::table* found = n->as_table()) return *found;
    throw std::runtime_error(where + " must be a table");
  }
  return *t.insert_or_assign(key, toml::table{}).first->second.as_table();
}

// f(name, table) for each [engines.NAME] table.
template <class F>
void each_engine(toml::table& doc, F&& f) {
  if (toml::table* engines = doc["engines"].as_table())
    for (auto& [name, decl] : *engines)
      if (toml::table* t = decl.as_table()) f(std::string(name.str()), *t);
}

// [server] listen / admin_listen with a new address or port (the rest as the manifest, or the default, has it).
void set_endpoint(toml::table& server, const char* key, const Endpoint& fallback, const std::string& host, std::optional<int> port) {
  Endpoint e = fallback;
  if (auto text = server[key].value<std::string>())
    if (auto hp = split_host_port(*text)) e.host = hp->host, e.port = hp->port;
  if (!host.empty()) e.host = host;
  if (port) e.port = *port;
  server.insert_or_assign(key, e.host + ":" + std::to_string(e.port));
}

}  // namespace

void add_serve_flags(CLI::App& serve, ServeFlags& f) {
  serve.add_option("-a,--alias,--served-model-name", f.alias,
                   "The name clients see in /v1/models and responses, and may ask for, besides the manifest's\n"
                   "([models.X] aliases; llama-server's --alias, vLLM's --served-model-name)");
  serve.add_option("-m,--model", f.model_file,
                   "A GGUF model file to serve in place of the manifest's one model (the default manifest's demo model, "
                   "when no manifest is given)")
      ->check(CLI::ExistingFile);
  serve.add_option("-c,--ctx-size", f.ctx_size, "Every model's context_len: the most positions one request holds");
  serve.add_option("--kv-dtype", f.kv_dtype, "Every engine's KV cache element type (f32, f16, q8_0)");
  serve.add_option("--api-key", f.api_keys, "An API key the gateway requires (repeatable; replaces [server] api_keys)");
  serve.add_option("--record", f.record,
                   "Append a JSON line per finished request (arrival time, prompt and output lengths, no text) to\n"
                   "FILE, for `tokenhost bench --replay` ([server] record_traffic)");
  serve.add_flag("--record-text", f.record_text, "With --record: keep the prompts' text too ([server] record_text)");
  serve.add_option("--api-key-file", f.api_key_file, "A file of API keys, one per line ([server] api_keys_file)")
      ->check(CLI::ExistingFile);
  serve.add_option("-t,--threads", f.threads, "Compute threads of the engines without a partition ([server] compute_threads)");
  serve.add_option("--kvcache", f.kvcache, "Every engine's kvcache plugin (kvcache.paged, kvcache.prefix for prefix caching), its config kept");
  serve.add_option("--spec", f.spec,
                   "Speculative decoding on every engine with this proposer (ngram, suffix, draft, early_exit, or a plugin id)");
  serve.add_option("--draft-model", f.draft_model, "A GGUF draft model for --spec draft ([models.draft]; implies --spec draft)")
      ->check(CLI::ExistingFile);
  serve.add_option("--parallel,--max-seqs", f.max_seqs, "Every engine's max_step_seqs: the most sequences one step carries (also -np)");
  serve.add_option("--host", f.host, "The gateway's address, in place of [server] listen's (the admin API keeps its own)");
  serve.add_option("--port", f.port, "The gateway's port, in place of [server] listen's (0: any free port)")->check(CLI::Range(0, 65535));
  serve.add_option("--admin-port", f.admin_port, "The admin API's port, in place of [server] admin_listen's")->check(CLI::Range(0, 65535));
  serve.add_option("--n-gpu-layers,--gpu-layers", f.gpu_layers,
                   "Accepted as llama-server takes it (also -ngl): this host places whole engines on a device (the manifest's "
                   "`device`), so it says so and goes on");
  serve.add_flag("--print-manifest", f.print_manifest, "Print the effective manifest (the manifest with these flags written in) and exit");
}

std::string effective_manifest(const std::string& path, const ServeFlags& f, std::vector<std::string>& notes) {
  const std::string label = path.empty() ? "<embedded manifests/default.toml>" : path;
  const std::string text = path.empty() ? std::string(embedded_default_manifest()) : TomlReader::read_text(path);
  toml::table doc;
  try {
    doc = toml::parse(text, label);
  } catch (const toml::parse_error&) {
    read_deployment(label, text);  // reports the syntax error with its position
    throw;
  }
  // [models] of a manifest with one model, for a flag that changes that model.
  // does: "--model replaces", say; hint: what to do instead, or "".
  auto the_one_model = [&](const std::string& does, const std::string& hint) -> toml::table& {
    toml::table* models = doc["models"].as_table();
    if (models == nullptr || models->size() != 1)
      throw std::runtime_error(does + " the one model of a manifest; " + (path.empty() ? std::string("the default") : path) +
                               " declares " + std::to_string(models ? models->size() : 0) + hint);
    return *models;
  };
  if (!f.model_file.empty()) {  // the one model replaced, every engine serving it
    toml::table* models = &the_one_model("--model replaces", "");
    const std::string name = std::filesystem::path(f.model_file).stem().string();
    models->clear();
    models->insert(name, toml::table{{"source", "gguf"}, {"path", std::filesystem::absolute(f.model_file).string()}});
    each_engine(doc, [&](const std::string&, toml::table& e) { e.insert_or_assign("model", name); });
  }
  if (!f.alias.empty())  // the name clients see and may ask for
    if (toml::table* m = the_one_model("--alias names", " (set aliases in each [models.X])").begin()->second.as_table()) m->insert_or_assign("aliases", toml::array{f.alias});
  if (f.ctx_size)
    if (toml::table* models = doc["models"].as_table())
      for (auto& [name, decl] : *models)
        if (toml::table* m = decl.as_table()) m->insert_or_assign("context_len", int64_t(*f.ctx_size));
  std::string spec = f.spec;
  if (!f.draft_model.empty()) {
    if (!spec.empty() && spec != "draft" && spec != "spec_decode.draft")
      throw std::runtime_error("--draft-model is the draft model of --spec draft, not of --spec " + spec);
    spec = "draft";
    table_at(doc, "models", "[models]")
        .insert_or_assign("draft", toml::table{{"source", "gguf"}, {"path", std::filesystem::absolute(f.draft_model).string()}});
  }
  if (!spec.empty() && spec.find('.') == std::string::npos) spec = "spec_decode." + spec;
  const std::string kvcache = !f.kvcache.empty() && f.kvcache.find('.') == std::string::npos ? "kvcache." + f.kvcache : f.kvcache;
  each_engine(doc, [&](const std::string& name, toml::table& e) {
    if (!f.kv_dtype.empty()) e.insert_or_assign("kv_dtype", f.kv_dtype);
    if (f.max_seqs) e.insert_or_assign("max_step_seqs", int64_t(*f.max_seqs));
    if (!kvcache.empty()) table_at(e, "kvcache", "[engines." + name + ".kvcache]").insert_or_assign("plugin", kvcache);
    if (!spec.empty()) {
      toml::table slot{{"plugin", spec}};
      if (!f.draft_model.empty()) slot.insert("config", toml::table{{"model", "draft"}});
      e.insert_or_assign("spec_decode", std::move(slot));
    }
  });
  if (!f.api_keys.empty() || !f.api_key_file.empty() || f.threads || !f.host.empty() || f.port || f.admin_port || !f.log_level.empty() ||
      !f.record.empty() || f.record_text) {
    toml::table& server = table_at(doc, "server", "[server]");
    if (!f.api_keys.empty()) {
      toml::array keys;
      for (const auto& k : f.api_keys) keys.push_back(k);
      server.insert_or_assign("api_keys", std::move(keys));
    }
    if (!f.api_key_file.empty()) server.insert_or_assign("api_keys_file", std::filesystem::absolute(f.api_key_file).string());
    if (f.threads) server.insert_or_assign("compute_threads", int64_t(*f.threads));
    if (!f.host.empty() || f.port) set_endpoint(server, "listen", ServerDecl{}.listen, f.host, f.port);
    if (f.admin_port) set_endpoint(server, "admin_listen", ServerDecl{}.admin_listen, "", f.admin_port);
    if (!f.log_level.empty()) server.insert_or_assign("log_level", f.log_level);
    if (!f.record.empty()) server.insert_or_assign("record_traffic", std::filesystem::absolute(f.record).string());
    if (f.record_text) server.insert_or_assign("record_text", true);
  }
  if (f.gpu_layers)
    notes.push_back("--n-gpu-layers " + std::to_string(*f.gpu_layers) +
                    " means nothing here: tokenhost places whole engines on a device (an engine's `device` in the manifest, "
                    "\"cpu\" unless it names a GPU), not layers; the flag is ignored");
  std::ostringstream out;
  out << "# " << label << " with serve's flags written in\n" << doc << "\n";
  return out.str();
}

std::string unknown_serve_flag(const CLI::App& app, const CLI::App& serve, int argc, const char* const* argv) {
  int i = 1;
  while (i < argc && std::string(argv[i]) != "serve") ++i;
  std::vector<std::string> known;
  for (const CLI::App* a : {&serve, &app})
    for (const CLI::Option* o : a->get_options()) {
      for (const auto& n : o->get_lnames()) known.push_back("--" + n);
      for (const auto& n : o->get_snames()) known.push_back("-" + n);
    }
  for (++i; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;  // what follows is positional
    if (arg.size() < 2 || arg[0] != '-' || std::isdigit(static_cast<unsigned char>(arg[1]))) continue;  // a value, "-", a number
    const std::string name = arg.substr(0, arg.find('='));
    if (serve.get_option_no_throw(name) == nullptr && app.get_option_no_throw(name) == nullptr)
    {
      const std::string near = closest_match(name, known);
      return "serve has no option " + name + (near.empty() ? " (tokenhost serve --help lists them)" : " (did you mean " + near + "?)");
    }
  }
  return "";
}

}  // namespace tokenhost
