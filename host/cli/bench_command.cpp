#include "cli/bench_command.hpp"

#include <unistd.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <cmath>
#include <csignal>
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "loadgen/client.hpp"
#include "loadgen/compare.hpp"
#include "loadgen/distribution.hpp"
#include "loadgen/openai.hpp"
#include "loadgen/progress.hpp"
#include "loadgen/prompts.hpp"
#include "loadgen/report.hpp"
#include "loadgen/runner.hpp"
#include "loadgen/replay.hpp"
#include "loadgen/token_fit.hpp"
#include "cli/bench_sweep.hpp"
#include "manifest/deployment.hpp"
#include "util/atomic_file.hpp"
#include "util/stats.hpp"

namespace tokenhost {
namespace {

using namespace loadgen;

CLI::Validator token_count_spec() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          parse_length_distribution(s);
          return "";
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
      },
      "N|LO:HI|normal:MEAN:SD");
}

CLI::Validator http_url() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        try {
          parse_url(s);
          return "";
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
      },
      "URL");
}

// CLI::PositiveNumber prints the whole double range in its message; this says what the value is.
CLI::Validator positive(const std::string& what) {
  return CLI::Validator(
      [what](std::string& s) -> std::string {
        try {
          size_t used = 0;
          double v = std::stod(s, &used);
          if (used == s.size() && v > 0 && std::isfinite(v)) return "";
        } catch (const std::exception&) {
        }
        return "'" + s + "' is not a positive number of " + what;
      },
      "POSITIVE");
}

std::atomic<bool> g_stop{false};
// The first interrupt stops sending (requests in flight finish and the figures are printed); a
// second one ends the process.
extern "C" void on_bench_signal(int) {
  g_stop = true;
  std::signal(SIGINT, SIG_DFL);
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app, BenchOptions& o, BenchCompareOptions& compare, CLI::App** compare_command) {
  auto* cmd = app.add_subcommand(
      "bench",
      "Load-test an OpenAI-compatible server (tokenhost, llama-server, vLLM, ...) with streamed requests\n"
      "and synthetic prompts; report throughput, TTFT, inter-token latency and end-to-end latency.\n"
      "Closed loop: --concurrency N requests always in flight. Open loop: --rate R Poisson arrivals.\n"
      "Conversations: --turns T sends each closed-loop worker's requests as conversations of T turns, each\n"
      "turn the conversation so far (earlier prompts and answers) and a new message (prefix-cache and\n"
      "cache-aware-routing loads); the report adds the TTFT of the turns after the first.\n"
      "Prompts are words from a fixed list of 100 common English words, cut or lengthened to the\n"
      "lengths asked in the served model's tokens through its /tokenize (--prompt-units words: as\n"
      "drawn, about a token a word with most vocabularies).\n"
      "Percentiles interpolate linearly between the closest ranks (NumPy's default).\n"
      "The table goes to stdout (to stderr with --json -); exits 1 when any request failed.\n"
      "Ctrl-C stops sending; requests in flight finish and the figures cover what was sent.\n"
      "--repeat N runs it all N times: each figure per run, their median and a 95% interval;\n"
      "`tokenhost bench compare A.json B.json` then says, figure by figure, what changed.");
  cmd->add_option("--url", o.url, "Server base URL, http[s]://HOST:PORT (without /v1)")->check(http_url());
  cmd->add_option("--repeat", o.repeat,
                  "Run the whole measurement (warmup included) this many times: the JSON holds every run and, per\n"
                  "figure, the runs' values, median and 95% interval (what bench compare tests)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u));
  cmd->add_option("--replay", o.replay,
                  "Send a recorded traffic (serve --record FILE) again: each request at its recorded time after the\n"
                  "first, its prompt's length in tokens (its text when recorded) and its output length (as max_tokens,\n"
                  "with ignore_eos); the load options do not apply")
      ->check(CLI::ExistingFile);
  cmd->add_option("--sweep", o.sweep,
                  "NAME=V1,V2,...: run the measurement against a server bench starts afresh for each value of a\n"
                  "manifest key (dotted: engines.main.max_step_seqs=16,64) or a serve flag (--kv-dtype=f16,q8_0),\n"
                  "on --serve's manifest; a table of each value's medians, every run in --json");
  cmd->add_option("--serve", o.serve, "With --sweep: the base manifest (default: the embedded one)")->check(CLI::ExistingFile);
  cmd->add_option("--prompt-units", o.prompt_units,
                  "What --prompt-tokens and --turn-tokens count: tokens of the served model (each prompt cut or\n"
                  "lengthened to exactly that many through the server's /tokenize and /detokenize, before the run;\n"
                  "words when the server has neither) or words (about a token each with most vocabularies)")
      ->capture_default_str()
      ->check(CLI::IsMember({"tokens", "words"}));
  auto* cmp = cmd->add_subcommand("compare",
                                  "Compare two --json files of bench (a baseline, then a candidate) figure by figure: medians,\n"
                                  "the change, Welch's t-test on the runs' values corrected for the number of figures\n"
                                  "(Bonferroni), and a verdict per row: better, worse or no significant difference. A change is\n"
                                  "called when p < --alpha and it is at least --min-effect percent. Files of one run show the\n"
                                  "changes without a test (run with --repeat 3 or more).");
  cmp->add_option("baseline", compare.baseline, "The baseline's bench --json file")->required()->check(CLI::ExistingFile);
  cmp->add_option("candidate", compare.candidate, "The candidate's bench --json file")->required()->check(CLI::ExistingFile);
  cmp->add_option("--alpha", compare.alpha, "Family-wise significance level")->capture_default_str()->check(CLI::Range(1e-6, 0.5));
  cmp->add_option("--min-effect", compare.min_effect_pct, "Smallest change called, in percent of the baseline")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  cmp->add_flag("--json", compare.json, "Print the rows as JSON");
  *compare_command = cmp;
  cmd->add_option("--endpoint", o.endpoint, "completions (/v1/completions) or chat (/v1/chat/completions)")
      ->capture_default_str()
      ->check(CLI::IsMember({"completions", "chat"}));
  cmd->add_option("--model", o.model, "Model name to send (default: the first of GET /v1/models; none if that fails)");
  cmd->add_option("--api-key", o.api_key, "Sent as 'Authorization: Bearer KEY'")->envname("OPENAI_API_KEY");
  cmd->add_option("--cacert", o.ca_file, "With an https:// URL: PEM certificates to trust for the server's (default: the system's)")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--insecure", o.insecure, "With an https:// URL: take any certificate (encrypted, not authenticated)");
  auto* conc = cmd->add_option("--concurrency,-c", o.concurrency, "Closed loop: requests in flight at all times")
                   ->capture_default_str()
                   ->check(CLI::Range(1u, 100000u));
  auto* rate = cmd->add_option("--rate,-r", o.rate, "Open loop: mean arrivals per second (Poisson process)")
                   ->check(positive("requests per second"))
                   ->excludes(conc);
  cmd->add_option("--max-concurrency", o.max_concurrency, "Open loop: most requests in flight; later arrivals wait (default: no cap)")
      ->check(CLI::Range(1u, 100000u))
      ->needs(rate);
  cmd->add_option("--requests,-n", o.requests, "Measured requests in all (default 100, or unbounded with --duration)")
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 40));
  cmd->add_option("--duration", o.duration_s, "Seconds to send requests for; those in flight then finish and count")
      ->check(positive("seconds"));
  cmd->add_option("--warmup", o.warmup, "Requests sent first and left out of the figures")->capture_default_str();
  cmd->add_option("--prompt-tokens", o.prompt_tokens,
                  "Prompt length in tokens (see --prompt-units): N, LO:HI (uniform) or normal:MEAN:SD")
      ->capture_default_str()
      ->check(token_count_spec());
  cmd->add_option("--output-tokens", o.output_tokens, "Output length in tokens, sent as max_tokens: N, LO:HI or normal:MEAN:SD")
      ->capture_default_str()
      ->check(token_count_spec());
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Send \"ignore_eos\": true (vLLM, llama.cpp) so outputs run to max_tokens");
  cmd->add_option("--extra-body", o.extra_body,
                  "A JSON object merged into every request body, e.g. '{\"temperature\": 0}' for greedy decoding "
                  "(the OpenAI default samples at temperature 1) or '{\"tokenhost\": {\"max_draft\": 2}}'")
      ->check([](const std::string& v) {
        try {
          parse_extra_body(v);
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });
  cmd->add_option("--shared-prefix-fraction", o.shared_prefix_fraction,
                  "Fraction (0..1) of each prompt that is a prefix common to all requests")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--turns", o.turns,
                  "Closed loop: turns per conversation; a later turn sends the conversation so far and a new "
                  "message of --turn-tokens (1: independent requests)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1000u))
      ->excludes(rate);
  cmd->add_option("--turn-tokens", o.turn_tokens, "With --turns: length of each later turn's new message in tokens (about words): N, LO:HI or normal:MEAN:SD")
      ->capture_default_str()
      ->check(token_count_spec());
  cmd->add_option("--seed", o.seed, "Seed of the prompts, lengths and arrival times")->capture_default_str();
  cmd->add_flag("--no-stream", o.no_stream, "Non-streamed requests (TTFT is then the whole response time; no ITL)");
  cmd->add_option("--timeout", o.timeout_s, "Seconds to wait for a response's next bytes")
      ->capture_default_str()
      ->check(positive("seconds"));
  cmd->add_option("--json", o.json, "Also write the figures as JSON to FILE ('-': stdout)");
  cmd->add_flag("--quiet,-q", o.quiet, "No progress display nor table (errors still go to stderr)");
  return cmd;
}

// Whether host is this machine (a loopback name or address): a client there competes with the server
// for its cores.
bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0 || host == "0.0.0.0";
}

namespace {

// One measurement (the whole run, --repeat times) against url: its JSON document, and how many
// requests ended ok and failed. printed: whether the figures went to the table already.
struct Measured {
  nlohmann::json doc;
  uint64_t ok = 0, failed = 0;
  std::vector<std::pair<std::string, uint64_t>> errors;
  bool reachable = true;
};

Measured measure(const BenchOptions& o, const std::string& url) {
  Measured m;
  // A replay: the recording's requests at their times (an open loop of given arrivals). Read first: a
  // bad file is the first thing to say.
  std::vector<ReplayRequest> replay;
  if (!o.replay.empty()) replay = read_traffic(o.replay);
  if (const std::string host = parse_url(url).host; is_loopback(host) && !o.quiet)
    std::cerr << "bench: warning: the client runs on the server's machine (" << host << ", " << std::thread::hardware_concurrency()
              << " cores): its threads take cores from the server, so throughput reads low and latency high under load; "
                 "compare runs made the same way, or run the client elsewhere\n";
  EndpointOptions ep;
  ep.url = url;
  ep.chat = o.endpoint == "chat";
  ep.model = o.model;
  ep.api_key = o.api_key;
  ep.ca_file = o.ca_file;
  ep.insecure = o.insecure;
  ep.stream = !o.no_stream;
  ep.ignore_eos = o.ignore_eos || !o.replay.empty();  // a replay reproduces the recorded output lengths
  ep.extra_body = o.extra_body;
  ep.timeout_s = o.timeout_s;

  ModelsProbe probe = probe_models(ep);
  if (!probe.reachable) {
    std::cerr << "tokenhost bench: " << probe.error << "\n";
    m.reachable = false;
    return m;
  }
  if (ep.model.empty()) {
    if (probe.first_model)
      ep.model = *probe.first_model;
    else
      std::cerr << "tokenhost bench: " << probe.error << "; sending no model field\n";
  }

  LoadOptions load;
  load.concurrency = o.concurrency;
  load.rate = o.rate;
  load.max_concurrency = o.max_concurrency;
  load.requests = o.requests == 0 && o.duration_s <= 0 ? 100 : o.requests;
  load.duration_s = o.duration_s;
  load.warmup = o.warmup;
  load.turns = o.turns;
  load.seed = o.seed * 0x9e3779b97f4a7c15ULL + 1;
  load.stop = &g_stop;
  if (!replay.empty()) {
    for (const auto& r : replay) load.arrival_times.push_back(r.at_s);
    load.requests = replay.size();
    load.duration_s = 0;
    load.warmup = 0;
  }

  nlohmann::json config = {{"url", url},
                           {"endpoint", ep.chat ? "/v1/chat/completions" : "/v1/completions"},
                           {"model", ep.model.empty() ? nlohmann::json(nullptr) : nlohmann::json(ep.model)},
                           {"stream", ep.stream},
                           {"mode", !replay.empty() ? "replay" : load.rate > 0 ? "open" : "closed"},
                           {"concurrency", load.rate > 0 || !replay.empty() ? nlohmann::json(nullptr) : nlohmann::json(load.concurrency)},
                           {"rate", load.rate > 0 ? nlohmann::json(load.rate) : nlohmann::json(nullptr)},
                           {"max_concurrency", load.max_concurrency > 0 ? nlohmann::json(load.max_concurrency) : nlohmann::json(nullptr)},
                           {"requests", load.requests > 0 ? nlohmann::json(load.requests) : nlohmann::json(nullptr)},
                           {"duration_s", load.duration_s > 0 ? nlohmann::json(load.duration_s) : nlohmann::json(nullptr)},
                           {"warmup", load.warmup},
                           {"prompt_tokens", o.prompt_tokens},
                           {"output_tokens", o.output_tokens},
                           {"ignore_eos", ep.ignore_eos},
                           {"extra_body", o.extra_body.empty() ? nlohmann::json(nullptr) : nlohmann::json::parse(o.extra_body)},
                           {"shared_prefix_fraction", o.shared_prefix_fraction},
                           {"turns", o.turns},
                           {"turn_tokens", o.turns > 1 ? nlohmann::json(o.turn_tokens) : nlohmann::json(nullptr)},
                           {"seed", o.seed},
                           {"repeat", o.repeat},
                           {"replay", o.replay.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.replay)}};
  if (!o.quiet) {
    std::cerr << "bench: " << url << config["endpoint"].get<std::string>() << ", model "
              << (ep.model.empty() ? std::string("(none)") : ep.model) << ", ";
    if (!replay.empty())
      std::cerr << "replaying " << replay.size() << " recorded requests over " << replay.back().at_s << " s from " << o.replay;
    else
      std::cerr << (load.rate > 0 ? "open loop, " + std::to_string(load.rate) + " req/s" +
                                        (load.max_concurrency ? ", at most " + std::to_string(load.max_concurrency) + " in flight" : "")
                                  : "closed loop, concurrency " + std::to_string(load.concurrency))
                << ", prompt " << o.prompt_tokens << " tokens, output " << o.output_tokens << " tokens"
                << (o.turns > 1 ? ", conversations of " + std::to_string(o.turns) + " turns (+" + o.turn_tokens + " tokens each)" : "");
    std::cerr << (ep.stream ? "" : ", not streamed") << "\n";
  }

  // Prompt lengths in the served model's tokens: each prompt fitted through the server's tokenizer.
  std::unique_ptr<TokenFitter> fitter;
  if (o.prompt_units == "tokens") {
    fitter = std::make_unique<TokenFitter>(ep);
    if (!fitter->available()) {
      std::cerr << "bench: the server tokenizes nothing through /tokenize (" << fitter->why_not()
                << "): prompt lengths are words, about a token each\n";
      fitter.reset();
    }
  }
  config["prompt_units"] = fitter ? "tokens" : "words";
  const LengthDistribution turn_tokens = parse_length_distribution(o.turn_tokens);
  auto fitted = [&](Prompt p) {
    if (fitter) p.text = fitter->fit(p.text, p.words);
    return p;
  };
  const bool json_stdout = o.json == "-";
  std::vector<nlohmann::json> reports;
  Report report;
  for (uint32_t r = 0; r < o.repeat && !g_stop; ++r) {
    // Every run sends the same requests (the same seeds): what differs between runs is the server.
    PromptGenerator run_prompts(parse_length_distribution(o.prompt_tokens), parse_length_distribution(o.output_tokens),
                                o.shared_prefix_fraction, o.seed);
    // A known number of independent requests: fitted before the run, so no tokenizing between them.
    std::deque<Prompt> ready;
    if (!replay.empty()) {
      for (const auto& q : replay) {
        // The recorded length counts the server's BOS (and a chat template's tokens): the text is one less.
        Prompt p = run_prompts.of_length(std::max<uint32_t>(1, q.prompt_tokens - 1));
        p.max_tokens = q.output_tokens;
        if (!q.text.empty()) p.text = q.text;
        ready.push_back(q.text.empty() ? fitted(std::move(p)) : std::move(p));
      }
    } else if (fitter && load.requests > 0 && o.turns == 1) {
      if (!o.quiet && r == 0) std::cerr << "bench: fitting " << load.warmup + load.requests << " prompts to the server's tokens\n";
      for (uint64_t i = 0; i < load.warmup + load.requests; ++i) ready.push_back(fitted(run_prompts.next()));
    }
    auto next = [&] {
      if (ready.empty()) return fitted(run_prompts.next());
      Prompt p = std::move(ready.front());
      ready.pop_front();
      return p;
    };
    if (o.repeat > 1 && !o.quiet) std::cerr << "bench: run " << r + 1 << " of " << o.repeat << "\n";
    LiveCounters live;
    RunResult run;
    {
      std::unique_ptr<ProgressDisplay> progress;
      if (!o.quiet)
        progress = std::make_unique<ProgressDisplay>(live, load.requests, load.duration_s, load.warmup, isatty(fileno(stderr)) != 0);
      run = run_load(ep, load, next, &live, [&] { return fitted(run_prompts.follow_up(turn_tokens)); });
    }
    report = make_report(run);
    m.failed += report.failed;
    m.ok += report.ok;
    if (!o.quiet) (json_stdout ? std::cerr : std::cout) << format_table(report) << std::flush;
    reports.push_back(to_json(report, config));
  }
  m.errors = report.errors;
  if (fitter && fitter->inexact() > 0 && !o.quiet)
    std::cerr << "bench: " << fitter->inexact() << " prompt(s) tokenize one or two tokens off their length (a merge across the cut)\n";
  m.doc = o.repeat > 1 ? repeats_json(reports, config) : reports.back();
  if (o.repeat > 1 && !o.quiet) (json_stdout ? std::cerr : std::cout) << format_repeats(m.doc) << std::flush;
  return m;
}

// A sweep's table: one row per value, each figure's median over the runs.
std::string format_sweep(const Sweep& sweep, const std::vector<nlohmann::json>& docs) {
  const std::vector<std::string> names = {"output_throughput", "ttft_ms.p50", "ttft_ms.p99", "itl_ms.p50", "e2e_latency_ms.p50"};
  std::ostringstream out;
  out << "sweep of " << sweep.name << " (medians over the runs of each value)\n";
  out << std::left << std::setw(16) << "value";
  for (const auto& n : names) out << std::setw(20) << n;
  out << "\n";
  for (size_t i = 0; i < docs.size(); ++i) {
    out << std::setw(16) << sweep.values[i];
    for (const auto& n : names) {
      const std::vector<double> v = figure_values(docs[i], n);
      char buf[32] = "-";
      if (!v.empty()) std::snprintf(buf, sizeof buf, "%.2f", percentile(v, 50));
      out << std::setw(20) << buf;
    }
    out << "\n";
  }
  return out.str();
}

bool write_json(const std::string& path, const nlohmann::json& doc) {
  const std::string text = doc.dump(2) + "\n";
  if (path == "-") {
    std::cout << text << std::flush;
    return true;
  }
  try {
    write_file_atomically(path, text);  // no half-written file under the name asked
  } catch (const std::runtime_error& e) {
    std::cerr << "tokenhost bench: " << e.what() << "\n";
    return false;
  }
  return true;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  if (o.url.empty() && o.sweep.empty()) {
    std::cerr << "tokenhost bench: --url is required (the server to load), or --sweep (servers bench starts), or "
                 "`bench compare A.json B.json`\n";
    return 1;
  }
  if (!o.url.empty() && !o.sweep.empty()) {
    std::cerr << "tokenhost bench: --sweep starts a server of its own for each value: leave out --url\n";
    return 1;
  }
  g_stop = false;
  auto old_int = std::signal(SIGINT, on_bench_signal);
  int status = 0;
  if (o.sweep.empty()) {
    const Measured m = measure(o, o.url);
    if (!m.reachable) status = 1;
    else {
      if (!o.json.empty() && !write_json(o.json, m.doc)) status = 1;
      if (m.failed > 0 && o.quiet)
        for (const auto& [msg, n] : m.errors) std::cerr << "tokenhost bench: " << n << " request(s) failed: " << msg << "\n";
      if (m.failed > 0 || m.ok == 0) status = 1;
    }
  } else {
    const Sweep sweep = parse_sweep(o.sweep);
    std::vector<std::string> manifests;
    for (const auto& v : sweep.values) {  // every value's manifest read as serve reads it, before any server starts
      manifests.push_back(sweep_manifest(o.serve, sweep, v));
      try {
        (void)read_deployment(o.serve.empty() ? "sweep.toml" : o.serve, manifests.back());
      } catch (const std::exception& e) {
        throw std::invalid_argument("--sweep " + sweep.name + "=" + v + ": " + e.what());
      }
    }
    char dir_template[] = "/tmp/tokenhost-sweep-XXXXXX";
    const char* dir = ::mkdtemp(dir_template);
    if (dir == nullptr) throw std::runtime_error("--sweep: cannot make a folder under /tmp");
    if (!o.quiet) std::cerr << "bench: sweeping " << sweep.name << " over " << sweep.values.size() << " values; manifests and logs in " << dir << "\n";
    std::vector<nlohmann::json> docs;
    for (size_t i = 0; i < sweep.values.size() && !g_stop; ++i) {
      if (!o.quiet) std::cerr << "bench: " << sweep.name << " = " << sweep.values[i] << "\n";
      const std::string manifest_dir =
          o.serve.empty() ? std::string(dir) : std::filesystem::absolute(o.serve).parent_path().string();
      ChildServer server(manifests[i], manifest_dir, dir, "value" + std::to_string(i));
      Measured m = measure(o, server.url());
      if (!m.reachable) throw std::runtime_error("--sweep: the server for " + sweep.values[i] + " did not answer; its log: " + server.log_path());
      if (m.failed > 0 || m.ok == 0) status = 1;
      m.doc["sweep_value"] = sweep.values[i];
      docs.push_back(std::move(m.doc));
    }
    const std::string table = format_sweep(sweep, docs);
    (o.json == "-" ? std::cerr : std::cout) << table << std::flush;
    nlohmann::json doc = {{"sweep", {{"name", sweep.name}, {"values", sweep.values}, {"serve", o.serve.empty() ? "(the embedded default)" : o.serve}}},
                          {"results", docs}};
    if (!o.json.empty() && !write_json(o.json, doc)) status = 1;
  }
  std::signal(SIGINT, old_int);
  if (g_stop) std::cerr << "tokenhost bench: interrupted; the figures cover the requests that were sent\n";
  return status;
}

int run_bench_compare(const BenchCompareOptions& o) {
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw std::invalid_argument(path + " is not JSON (a bench --json file)");
    return j;
  };
  const nlohmann::json a = read(o.baseline), b = read(o.candidate);
  std::vector<CompareRow> rows;
  try {
    rows = compare(a, b, o.alpha, o.min_effect_pct / 100);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + " (" + o.baseline + ", " + o.candidate + ")");
  }
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows) {
      auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
      out.push_back({{"figure", r.figure.name}, {"unit", r.figure.unit}, {"baseline", num(r.baseline)}, {"candidate", num(r.candidate)},
                     {"delta", num(r.delta)}, {"p", num(r.p_value)}, {"runs", {r.n_baseline, r.n_candidate}}, {"verdict", r.verdict}});
    }
    std::cout << out.dump(2) << std::endl;
  } else {
    std::cout << format_compare(rows, o.baseline, o.candidate, o.alpha, o.min_effect_pct / 100);
  }
  return 0;
}

}  // namespace tokenhost
