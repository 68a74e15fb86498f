// `tokenhost admin ...`: operates a running server through its admin API (host/admin/admin_client):
// status, plugins, slot swaps and unloads, the router, engines added and removed, experiments (ab).
// Each leaf command records what to do in AdminOptions::action; run_admin connects and does it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace tokenhost {

class AdminClient;

// The arguments leaf commands take, as CLI11 fills them in.
struct AdminArgs {
  std::string engine, slot, plugin, config_json, manifest, file;
  std::string output;  // export: the file to write ("": standard output)
  std::vector<std::string> settings;  // --set key=value
  double grace_s = 30;
  // ab: the experiment, its arms (ARM=ENGINE:PERCENT to start, ARM=PERCENT to change), hold-backs.
  std::string experiment;
  std::vector<std::string> arms, holdbacks, no_holdback;
  std::string sticky_key = "session";
  bool allow_request_choice = false;
  int min_samples = 0;  // 0: the server's default
  // layer: what to do with a stacking slot's layer (insert, replace, remove) and where (-1: append).
  std::string layer_op;
  int layer = -1;
};

struct AdminOptions {
  std::string url;       // --url; else $TOKENHOST_ADMIN_URL, the --manifest's admin_listen, http://127.0.0.1:8081
  std::string manifest;  // --manifest: the deployment whose [server] admin_listen (and TLS) to reach
  std::string token;
  std::string ca_file;    // https: the certificates to trust
  bool insecure = false;  // https: any certificate
  bool json = false;  // print the server's JSON answer instead of a summary
  AdminArgs args;
  std::function<int(AdminClient&, const AdminOptions&)> action;
};

// Adds `admin` and its subcommands to app.
CLI::App* add_admin_command(CLI::App& app, AdminOptions& options);
// Adds `ab` (A/B experiments) under `admin` (admin_ab_command.cpp).
void add_ab_command(CLI::App& admin, AdminOptions& options);
// Adds `guards` (circuit breakers, overload) under `admin` (admin_guards_command.cpp).
void add_guards_command(CLI::App& admin, AdminOptions& options);
// Exit status: 0 when the server did what was asked, 1 when it refused (its reason printed) or could
// not be reached.
int run_admin(const AdminOptions& options);

// `--set key=value` pairs as a JSON object: a value that reads as JSON (number, true/false, "quoted")
// keeps its type, anything else is a string. Throws CLI::ValidationError for an item without '='.
nlohmann::json parse_settings(const std::vector<std::string>& items);
// Prints an answer: JSON when options.json, else the line(s) `summary` gives for it.
void print_answer(const AdminOptions& options, const nlohmann::json& answer, const std::string& summary);

}  // namespace tokenhost
