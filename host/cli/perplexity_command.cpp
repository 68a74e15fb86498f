#include "cli/perplexity_command.hpp"

#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "base/kv_dtypes.hpp"
#include "cli/in_process.hpp"
#include "http/http_client.hpp"
#include "loadgen/client.hpp"
#include "runtime/logit_file.hpp"
#include "runtime/perplexity.hpp"
#include "util/atomic_file.hpp"

namespace tokenhost {

CLI::App* add_perplexity_command(CLI::App& app, PerplexityCommand& o) {
  auto* cmd = app.add_subcommand(
      "perplexity",
      "A model's perplexity on a text file, chunked as llama-perplexity does (BOS first, chunks of --ctx\n"
      "tokens each starting with BOS, the second half of each scored; the file's last newline left out),\n"
      "so the numbers compare with llama.cpp's. --kl-divergence-base saves every scored distribution; a\n"
      "later run with --kl-divergence compares its own with them: KL divergence, top-1 agreement, the\n"
      "ratio of the perplexities. -m runs the model in process; --url scores through a running server.\n"
      "Progress per chunk on stderr, the result on stdout.");
  auto* model = cmd->add_option("--model,-m", o.model, "GGUF model file (in process)")->check(CLI::ExistingFile);
  auto* url = cmd->add_option("--url", o.url,
                              "Score through a running server instead (http[s]://HOST:PORT): /tokenize, then\n"
                              "/v1/completions with echo, logprobs and max_tokens 0 per chunk; its deployment's\n"
                              "plugins, KV type and sliding window apply (--kv-dtype and --set do not)");
  model->excludes(url);
  cmd->add_option("--served-model", o.served_model, "With --url: the model to ask for (default: the server's first)");
  cmd->add_option("--api-key", o.api_key, "With --url: the API key (default: $TOKENHOST_API_KEY)");
  cmd->add_option("--file,-f", o.text_file, "Text file (UTF-8)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--ctx,-c,--ctx-size", o.ctx, "Tokens per chunk (at most the model's context)")
      ->check(CLI::Range(4u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("--chunks", o.chunks, "Chunks at most (-1: every whole chunk of the text)")->capture_default_str();
  cmd->add_option("--kv-dtype", o.kv_dtype, "KV cache element type: f16, f32 or q8_0")
      ->check(CLI::IsMember(kv_dtype_names()))
      ->capture_default_str();
  cmd->add_option("--set", o.sets,
                  "SLOT=PLUGIN chooses the attention, kvcache or moe plugin; SLOT.KEY=VALUE sets a key of its\n"
                  "config (VALUE as TOML: 128, 0.5, true, \"text\"); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--kl-divergence-base", o.save_base,
                  "Save every scored position's distribution here (the base a later --kl-divergence reads)");
  cmd->add_option("--kl-divergence", o.compare_base,
                  "Compare with the distributions a run with --kl-divergence-base saved (same text, --ctx and --chunks)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--prefill-chunk", o.prefill_chunk, "Tokens per forward step")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  cmd->add_flag("--json", o.json, "Print the result as JSON");
  return cmd;
}

namespace {

void print_text(const PerplexityResult& r) {
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl.value, r.ppl.error);
  if (!r.has_kl) return;
  const KlStatistics& k = r.kl;
  std::printf("====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6f +/- %10.6f\n", r.ppl.value, r.ppl.error);
  std::printf("Mean PPL(base)                : %10.6f +/- %10.6f\n", k.ppl_base.value, k.ppl_base.error);
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f +/- %10.6f\n", k.ln_ppl_ratio.value, k.ln_ppl_ratio.error);
  std::printf("====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f +/- %10.6f\n", k.kld.value, k.kld.error);
  std::printf("Maximum KLD: %10.6f\n", k.kld_max);
  std::printf("99.9%%   KLD: %10.6f\n", k.kld_p999);
  std::printf("99.0%%   KLD: %10.6f\n", k.kld_p99);
  std::printf("Median  KLD: %10.6f\n", k.kld_median);
  std::printf("====== Token probability statistics ======\n");
  std::printf("RMS Δp    : %8.3f %%\n", 100 * k.rms_delta_p);
  std::printf("Same top p: %8.3f +/- %6.3f %%\n", 100 * k.same_top.value, 100 * k.same_top.error);
}

nlohmann::json as_json(const PerplexityResult& r) {
  auto est = [](const Estimate& e) { return nlohmann::json{{"value", e.value}, {"error", e.error}}; };
  nlohmann::json j = {{"tokens", r.n_tokens}, {"n_ctx", r.n_ctx}, {"chunks", r.n_chunks}, {"scored", r.scored},
                      {"ppl", est(r.ppl)}, {"nll", r.nll}};
  if (r.has_kl) {
    const KlStatistics& k = r.kl;
    j["kl"] = {{"ppl_base", est(k.ppl_base)}, {"ln_ppl_ratio", est(k.ln_ppl_ratio)}, {"kld", est(k.kld)},
               {"kld_max", k.kld_max}, {"kld_p999", k.kld_p999}, {"kld_p99", k.kld_p99}, {"kld_median", k.kld_median},
               {"rms_delta_p", k.rms_delta_p}, {"same_top", est(k.same_top)}};
  }
  return j;
}

// A running server: its tokenizer through /tokenize, each chunk through /v1/completions with echo,
// logprobs and max_tokens 0 (the prompt's log-probabilities).
struct ServerScoring {
  HttpClient client;
  std::string model;

  ServerScoring(const PerplexityCommand& o, HttpClientOptions options) : client(make(o.url, options)), model(o.served_model) {}

  static HttpClient make(const std::string& url, HttpClientOptions& options) {
    const loadgen::Target t = loadgen::parse_url(url);
    options.tls.enabled = t.tls;
    return HttpClient(t.host, t.port, options);
  }

  nlohmann::json post(const std::string& path, nlohmann::json body) {
    if (!model.empty()) body["model"] = model;
    HttpClientRequest req;
    req.method = "POST";
    req.target = path;
    req.content_type = "application/json";
    req.body = body.dump();
    const HttpClientResult r = client.request(req);
    if (!r.ok()) throw std::runtime_error(path + ": " + r.message);
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (r.status != 200 || j.is_discarded()) {
      std::string why = r.body.substr(0, 400);
      if (!j.is_discarded() && j.contains("error") && j["error"].is_object()) why = j["error"].value("message", why);
      throw std::runtime_error(path + " answered " + std::to_string(r.status) + ": " + why);
    }
    return j;
  }

  std::vector<int32_t> tokenize(const std::string& text, bool add_special) {
    return post("/tokenize", {{"content", text}, {"add_special", add_special}}).at("tokens").get<std::vector<int32_t>>();
  }

  ChunkScorer scorer() {
    return [this](const std::vector<int32_t>& chunk, uint32_t first, const ScoredRow& row) {
      const nlohmann::json answer = post("/v1/completions", {{"prompt", chunk}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}});
      const nlohmann::json& lp = answer.at("choices").at(0).at("logprobs").at("token_logprobs");
      if (!lp.is_array() || lp.size() != chunk.size())
        throw std::runtime_error("/v1/completions gave " + std::to_string(lp.size()) + " prompt log-probabilities for " +
                                 std::to_string(chunk.size()) + " tokens");
      for (uint32_t p = first; p + 1 < chunk.size(); ++p) {
        if (!lp[p + 1].is_number()) throw std::runtime_error("/v1/completions gave no log-probability for prompt token " + std::to_string(p + 1));
        row(p, lp[p + 1].get<double>(), nullptr);
      }
    };
  }
};

void report(const PerplexityCommand& o, const PerplexityResult& r) {
  if (o.json) {
    std::cout << as_json(r).dump(2) << std::endl;
  } else {
    print_text(r);
  }
}

void progress(const std::chrono::steady_clock::time_point& started, uint32_t done, uint32_t of, double ppl) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::fprintf(stderr, "[%u/%u] PPL %.4f, %.1f s, about %.0f s left\n", done, of, ppl, s, s / done * (of - done));
}

std::string text_of(const std::string& path) {
  std::string text = read_file(path);
  if (!text.empty() && text.back() == '\n') text.pop_back();  // as llama.cpp's -f reads a file
  return text;
}

int run_against_server(const PerplexityCommand& o) {
  if (!o.save_base.empty() || !o.compare_base.empty())
    throw std::invalid_argument("--kl-divergence and --kl-divergence-base need the whole distributions: run in process (-m), not --url");
  HttpClientOptions options;
  options.read_timeout = std::chrono::minutes(10);
  std::string key = o.api_key;
  if (key.empty())
    if (const char* env = std::getenv("TOKENHOST_API_KEY")) key = env;
  if (!key.empty()) options.headers.emplace_back("Authorization", "Bearer " + key);
  ServerScoring server(o, options);
  const std::vector<int32_t> tokens = server.tokenize(text_of(o.text_file), true);
  // The BOS each chunk starts with: what add_special puts first, when it puts anything.
  const std::vector<int32_t> with = server.tokenize("a", true), without = server.tokenize("a", false);
  PerplexityOptions options_ppl;
  options_ppl.n_ctx = o.ctx;
  options_ppl.n_chunks = o.chunks;
  options_ppl.bos = with.size() > without.size() ? with.front() : -1;
  spdlog::info("perplexity of {} through {}: {} tokens, chunks of {}", o.text_file, o.url, tokens.size(), o.ctx);
  const auto started = std::chrono::steady_clock::now();
  const PerplexityResult r = run_perplexity(server.scorer(), tokens, 0, options_ppl, [&](uint32_t done, uint32_t of, double ppl) {
    progress(started, done, of, ppl);
  });
  report(o, r);
  return 0;
}

}  // namespace

int run_perplexity_command(const PerplexityCommand& o) {
  if (!o.url.empty()) return run_against_server(o);
  if (o.model.empty()) throw std::invalid_argument("perplexity needs a model: -m FILE (in process) or --url (a running server)");
  InProcessSetup setup;
  setup.model_path = o.model;
  setup.kv_dtype = o.kv_dtype;
  setup.prefill_chunk = o.prefill_chunk;
  setup.positions = o.ctx;
  for (const std::string& flag : o.sets) apply_set_flag(setup, flag);
  InProcessModel m = load_in_process(setup);
  const uint32_t context = m.model.weights->spec.info.context_len;
  if (o.ctx > context)
    throw std::invalid_argument("--ctx " + std::to_string(o.ctx) + " is past the model's context of " + std::to_string(context));
  build_generator(m, setup);

  const Tokenizer& tokenizer = *m.tokenizer;
  const std::vector<int32_t> tokens = tokenizer.encode(text_of(o.text_file), /*add_bos=*/true, /*parse_special=*/false);
  PerplexityOptions options;
  options.n_ctx = o.ctx;
  options.n_chunks = o.chunks;
  options.bos = tokenizer.spec().add_bos ? tokenizer.bos() : -1;
  const uint32_t vocab = m.model.weights->spec.info.vocab_size;

  std::unique_ptr<LogitFileReader> base_in;
  if (!o.compare_base.empty()) base_in = std::make_unique<LogitFileReader>(o.compare_base);
  const ChunkPlan plan = plan_chunks(tokens.size(), options);
  std::unique_ptr<LogitFileWriter> base_out;
  if (!o.save_base.empty()) {
    const LogitFileShape shape{vocab, o.ctx, plan.n_chunks, plan.first, plan.rows};
    base_out = std::make_unique<LogitFileWriter>(o.save_base, shape,
                                                 std::vector<int32_t>(tokens.begin(), tokens.begin() + size_t(plan.n_chunks) * o.ctx));
  }
  spdlog::info("perplexity of {}: {} tokens, {} chunks of {} ({} scored each), KV {}", o.text_file, tokens.size(), plan.n_chunks, o.ctx,
               plan.rows, o.kv_dtype);
  const auto started = std::chrono::steady_clock::now();
  const PerplexityResult r = run_perplexity(
      *m.generator, tokens, vocab, options,
      [&](uint32_t done, uint32_t of, double ppl) { progress(started, done, of, ppl); },
      base_out.get(), base_in.get());
  if (base_out) {
    base_out->finish();
    spdlog::info("saved {} distributions to {}", r.scored, o.save_base);
  }
  report(o, r);
  return 0;
}

}  // namespace tokenhost
