#include "request/client_request.hpp"

#include <algorithm>
#include <optional>
#include <random>
#include <set>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/api_error.hpp"
#include "api/client_json.hpp"
#include "api/openai_request.hpp"
#include "api/openai_response.hpp"
#include "api/stop_strings.hpp"
#include "base/request_defaults.hpp"
#include "model/tokenizer.hpp"
#include "request/request_id.hpp"
#include "server/gateway.hpp"

namespace tokenhost::request {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A request answered whole that has not finished by then ends with 504.
constexpr std::chrono::minutes kAnswerLimit{10};

const char* route_name(Route r) {
  switch (r) {
    case Route::completions: return "completions";
    case Route::chat_completions: return "chat";
    case Route::generate: return "generate";
  }
  return "?";
}

Reply api_error(const api::ApiError& e) {
  Reply r;
  r.status = e.http_status;
  r.body = api::dump_json(e.to_json());
  return r;
}

api::ApiError server_error(int status, const std::string& message) {
  api::ApiError e;
  e.http_status = status;
  e.message = message;
  e.type = status == 503 ? "service_unavailable" : "server_error";
  return e;
}

// /v1/generate's errors: {"error": {"message", "type"}}.
Reply plain_error(int status, const std::string& message, const std::string& type) {
  Reply r;
  r.status = status;
  r.body = api::dump_json(json{{"error", {{"message", message}, {"type", type}}}});
  return r;
}

// A refused admission: its status (429, 503), an OpenAI-shaped error whose code names the limit, and
// Retry-After.
api::ApiError refusal_error(const AdmissionRefusal& refusal) {
  api::ApiError e;
  e.http_status = refusal.http_status;
  e.message = refusal.message;
  e.type = refusal.http_status == 429 ? "rate_limit_error" : "service_unavailable";
  e.code = refusal.code;
  return e;
}

Reply refusal(const AdmissionRefusal& refusal) {
  Reply r = api_error(refusal_error(refusal));
  r.headers.emplace_back("Retry-After", std::to_string(refusal.retry_after_s));
  return r;
}

// One choice: one sequence in an engine, and what of its output the client has been sent.
struct Choice {
  uint64_t id = 0;
  std::shared_ptr<TokenStream> stream;
  size_t seen = 0;  // tokens read from the stream
  api::StopMatcher stop;
  std::string text;  // sent (streaming) or to send
  std::vector<api::TokenLogprobs> logprobs;
  size_t tokens = 0;
  bool done = false;
  api::FinishReason finish = api::FinishReason::none;
  std::string error;
  bool role_sent = false;  // chat streams
  std::optional<GenerateResult> result;  // as the engine ended it (/v1/generate answers its tokens)
};

// What one update of a choice produced: text now safe to send and the logprobs of its tokens.
struct Delta {
  std::string text;
  std::vector<api::TokenLogprobs> logprobs;
  bool finished = false;
};

// Which model answered a choice and how (a group's request, or an answer from a router's cache): the
// response's `tokenhost` object for it.
json route_json(const GenerateResult& r) {
  json path = json::array();
  for (const auto& h : r.path)
    path.push_back({{"engine", h.engine}, {"model", h.model}, {"outcome", h.outcome}, {"tokens", h.tokens},
                    {"mean_logprob", h.mean_logprob}, {"min_logprob", h.min_logprob}, {"mean_entropy", h.mean_entropy}});
  return {{"model", r.model}, {"engine", r.engine}, {"cached", r.cached}, {"cost", r.cost}, {"path", path}};
}

}  // namespace

struct ClientRequest::State {
  State(Gateway& g, Route r, Caller c) : gateway(g), route(r), caller(std::move(c)) {}

  Gateway& gateway;
  const Route route;
  const Caller caller;
  api::OpenAIRequest req;
  const ServedModel* model = nullptr;  // NULL: /v1/generate with no engine left (one token per byte)
  ServedModel bytes_model;             // what model stands for then
  api::ResponseMeta meta;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;
  std::vector<uint32_t> max_new;
  int64_t prompt_tokens = 0;
  int32_t priority = 0;  // /v1/generate's; the OpenAI routes read req.priority
  bool ignore_eos = false;
  // Tool calling: how the model's template writes calls, and the ids given to the calls read back.
  api::ToolFormat tool_format = api::ToolFormat::none;
  std::mt19937_64 id_rng{std::random_device{}()};
  bool reads_tool_calls() const { return req.endpoint == api::Endpoint::chat_completions && req.tools.active(); }
  std::vector<Choice> choices;
  std::shared_ptr<StreamSignal> signal = std::make_shared<StreamSignal>();  // any choice's change
  std::shared_ptr<AdmissionTicket> ticket;
  std::vector<size_t> offsets;  // completions' text_offset per choice
  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  bool finished = false;

  const ServedModel& served() const { return model != nullptr ? *model : bytes_model; }
  // Whether the response says how each choice was answered (tokenhost.path): a group's requests, and
  // any answered from a router's cache.
  bool tells_route() const {
    if (!served().members.empty()) return true;
    return std::any_of(choices.begin(), choices.end(), [](const Choice& c) { return c.result && c.result->cached; });
  }
  bool openai() const { return route != Route::generate; }

  // --- Parsing ---

  // /v1/generate's body: prompt (text or token ids), max_tokens, priority. nullopt when it reads.
  std::optional<Reply> parse_generate(const std::string& body_text) {
    auto body = api::parse_client_json(body_text);
    if (!body) return plain_error(400, "malformed JSON: " + body.error().message, "invalid_request_error");
    if (!body->is_object()) return plain_error(400, "the request body must be a JSON object", "invalid_request_error");
    auto it = body->find("prompt");
    if (it == body->end()) return plain_error(400, "missing field 'prompt'", "invalid_request_error");
    std::vector<int32_t> tokens;
    if (it->is_string()) {
      tokens = gateway.encode(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& t : *it) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
          return plain_error(400, "'prompt' array must hold non-negative integer token ids", "invalid_request_error");
        tokens.push_back(int32_t(t.get<int64_t>()));
      }
    } else {
      return plain_error(400, "'prompt' must be a string or an array of token ids", "invalid_request_error");
    }
    auto max_tokens = body->value("max_tokens", json(kGenerateRouteMaxTokens));
    if (!max_tokens.is_number_integer() || max_tokens.get<int64_t>() < 1 || max_tokens.get<int64_t>() > int64_t(kMaxTokensLimit))
      return plain_error(400, "'max_tokens' must be an integer in [1, " + std::to_string(kMaxTokensLimit) + "]", "invalid_request_error");
    auto prio = body->value("priority", json(0));
    if (!prio.is_number_integer()) return plain_error(400, "'priority' must be an integer", "invalid_request_error");
    priority = int32_t(prio.get<int64_t>());
    model = gateway.find_model("");
    prompt_texts.emplace_back();
    max_new.push_back(uint32_t(max_tokens.get<int64_t>()));
    prompt_tokens = int64_t(tokens.size());
    prompts.push_back(std::move(tokens));
    return std::nullopt;
  }

  // An OpenAI body: parsed, its model found, its prompts tokenized and checked against the context.
  std::optional<Reply> parse_openai(const std::string& body_text) {
    auto read = api::parse_client_json(body_text);
    if (!read) return api_error(read.error());
    json body = std::move(read.value());
    if (!gateway.accepting()) return api_error(server_error(503, "the server is shutting down"));
    auto parsed = api::parse_request(route == Route::chat_completions ? api::Endpoint::chat_completions : api::Endpoint::completions, body);
    if (!parsed) return api_error(parsed.error());
    model = gateway.find_model(parsed->model);
    if (model == nullptr) {
      std::string names;
      for (const auto& m : gateway.models()) names += (names.empty() ? "" : ", ") + m.name;
      api::ApiError e = api::invalid_request("model", "model '" + parsed->model + "' does not exist; this server serves: " + names,
                                             "model_not_found");
      e.http_status = 404;
      return api_error(e);
    }
    // vLLM's and llama.cpp's extension for benchmarks: generate max_tokens whatever the model says.
    if (auto it = body.find("ignore_eos"); it != body.end() && !it->is_null()) {
      if (!it->is_boolean())
        return api_error(api::invalid_request("ignore_eos", "'ignore_eos' must be a boolean, got " + std::string(it->type_name())));
      ignore_eos = it->get<bool>();
    }
    if (!parsed->arm.empty()) {
      // Refused here, before anything starts, rather than as a failed generation.
      if (std::string why = gateway.check_arm_choice(model->name, parsed->arm); !why.empty())
        return api_error(api::invalid_request("tokenhost.arm", why, "arm_not_available"));
    }
    // nlohmann::json sorts an object's members; schemas are read again from the body as written (parsed
    // once, when a request has one), and the output follows the order of their properties.
    std::optional<nlohmann::ordered_json> ordered;
    auto as_written = [&](const char* key) -> const nlohmann::ordered_json& {
      if (!ordered) ordered = nlohmann::ordered_json::parse(body_text);
      return ordered->at(key);
    };
    if (!parsed->tools.tools.empty()) {
      auto t = api::parse_tools(as_written("tools"));
      if (!t) return api_error(t.error());
      parsed->tools.tools = std::move(t.value());
      tool_format = api::detect_tool_format(model->chat_template);
      if (parsed->tools.active() && tool_format == api::ToolFormat::none)
        return api_error(api::invalid_request("tools", "model '" + model->name + "''s chat template has no tool-call format this server " +
                                                           "writes (Llama 3.1's, Hermes' as Qwen2.5's): it cannot be given tools"));
      if (parsed->tools.active() && parsed->tools.choice != api::ToolChoice::automatic) {
        // A call is required: the answer is constrained to the tools' calls.
        auto grammar = api::tool_call_grammar(parsed->tools, tool_format);
        if (!grammar) return api_error(grammar.error());
        auto source = std::make_shared<ConstraintSource>();
        source->type = "gbnf";
        source->text = source->gbnf = grammar.value();
        parsed->constraint = std::move(source);
      }
    }
    if (parsed->constraint) {
      if (!model->tokenizer)
        return api_error(api::invalid_request(parsed->constraint->type == "gbnf" ? "tokenhost.grammar" : "response_format",
                                              "model '" + model->name + "' has no vocabulary (a synthetic model): its output cannot be constrained"));
      if (parsed->constraint->type == "json_schema") {  // only response_format gives one
        auto c = api::parse_response_format(as_written("response_format"));
        if (!c) return api_error(c.error());
        parsed->constraint = c.value();
      }
    }
    req = std::move(parsed.value());
    std::mt19937_64 rng(draw_random());
    meta = api::make_response_meta(req.endpoint, model->id(), rng);
    meta.include_usage = req.include_usage;
    if (auto e = tokenize()) return api_error(*e);
    return std::nullopt;
  }

  // Tokenizes and checks the prompts of an OpenAI request.
  std::optional<api::ApiError> tokenize() {
    const ServedModel& m = *model;
    if (req.endpoint == api::Endpoint::chat_completions) {
      api::ChatRenderOptions opts;
      if (const Tokenizer* t = m.tokenizer.get()) {
        if (t->bos() >= 0) opts.bos_token = t->spec().tokens.at(size_t(t->bos()));
        if (t->eos() >= 0) opts.eos_token = t->spec().tokens.at(size_t(t->eos()));
      }
      opts.tool_format = api::detect_tool_format(m.chat_template);  // calls and results in the history
      if (req.tools.active()) opts.tools = &req.tools.tools;
      auto rendered = api::render_chat(req.messages, m.chat_template, opts);
      if (!rendered) return rendered.error();
      if (!rendered->template_recognized)
        spdlog::warn("request {}: model {}: chat template not recognized; rendering messages as plain 'role: content' lines",
                     caller.request_id, m.name);
      prompts.push_back(m.encode(rendered->text, !rendered->includes_bos, true));
      prompt_texts.push_back(rendered->text);
    } else {
      for (const auto& prompt : req.prompts) {
        if (prompt.is_tokens) {
          for (size_t i = 0; i < prompt.tokens.size(); ++i) {
            if (prompt.tokens[i] < 0 || uint32_t(prompt.tokens[i]) >= m.vocab_size)
              return api::invalid_request("prompt", "token " + std::to_string(prompt.tokens[i]) + " at position " +
                                                        std::to_string(i) + " is outside the vocabulary of model " +
                                                        m.name + " (" + std::to_string(m.vocab_size) + " tokens)");
          }
          prompts.push_back(prompt.tokens);
          std::string text;
          for (int32_t t : prompt.tokens) text += m.piece(t);
          prompt_texts.push_back(text);
        } else {
          prompts.push_back(m.encode(prompt.text, true, true));
          prompt_texts.push_back(prompt.text);
        }
      }
    }
    for (const auto& [token, bias] : req.logit_bias)
      if (uint32_t(token) >= m.vocab_size)
        return api::invalid_request("logit_bias." + std::to_string(token), "token " + std::to_string(token) +
                                                                           " is outside the vocabulary of model " + m.name + " (" +
                                                                           std::to_string(m.vocab_size) + " tokens)");
    const std::string param = req.endpoint == api::Endpoint::chat_completions ? "messages" : "prompt";
    for (const auto& p : prompts) {
      if (p.empty()) return api::invalid_request(param, "the prompt is empty");
      // A sliding window bounds no request: the prompt is taken whole, and without max_tokens the output
      // is bounded as a fresh context would be.
      const int64_t context = m.window_cap > 0 ? int64_t(p.size()) + std::max<int64_t>(m.context_len, req.max_tokens.value_or(0))
                                               : int64_t(m.context_len);
      auto n = api::check_context(int64_t(p.size()), req.max_tokens, context, param, int64_t(gateway.limits().default_max_tokens));
      if (!n) return n.error();
      max_new.push_back(uint32_t(n.value()));
      prompt_tokens += int64_t(p.size());
    }
    return std::nullopt;
  }

  // What the request asks of the gateway's admission (server/admission.hpp), once parsed.
  AdmissionAsk ask() const {
    AdmissionAsk a;
    a.client = caller.client;
    a.model = served().name;
    if (!openai()) {  // one sequence; its KV demand is the engine's to weigh
      a.sequences = 1;
      a.tokens = prompts[0].size() + max_new[0];
      return a;
    }
    for (size_t p = 0; p < prompts.size(); ++p) {
      a.sequences += uint32_t(req.n);
      a.tokens += uint64_t(req.n) * (prompts[p].size() + max_new[p]);
      const uint64_t held = prompts[p].size() + max_new[p];  // a window holds its cap at most
      a.kv_tokens += uint64_t(req.n) * (model->window_cap > 0 ? std::min<uint64_t>(held, model->window_cap) : held);
    }
    return a;
  }

  // --- Running ---

  void start() {
    const uint64_t seed = draw_random();
    const int64_t n = openai() ? req.n : 1;
    for (size_t p = 0; p < prompts.size(); ++p) {
      for (int64_t k = 0; k < n; ++k) {
        GenerateRequest g;
        g.id = gateway.next_sequence_id();
        g.request_id = caller.request_id;
        g.live = openai() && req.stream;
        g.prompt = prompts[p];
        g.prompt_text = prompt_texts[p];
        g.max_tokens = max_new[p];
        g.session_key = caller.session_key;
        g.api_key = caller.api_key;
        g.client = caller.client;
        if (openai()) {
          g.priority = int32_t(req.priority);
          if (g.session_key.empty()) g.session_key = req.user;
          g.user = req.user;
          g.arm = req.arm;
          g.request_class = req.request_class;
          g.model = model->name;
          g.sampling = api::sampling_params(req, seed);
          g.sampling.seed += uint64_t(k);  // n choices of one seeded request differ, reproducibly
          g.seeded = req.seed.has_value();
          g.logprobs = req.logprobs;
          g.prompt_logprobs = req.echo && req.logprobs;
          g.ignore_eos = ignore_eos;
          if (req.max_draft) g.max_draft = *req.max_draft;
          g.cache_salt = req.cache_salt;
          g.constraint = req.constraint;
        } else {
          g.priority = priority;  // greedy, on the default model (its experiment applies)
        }
        Choice c;
        c.id = g.id;
        c.stop = api::StopMatcher(req.stop);
        c.stream = gateway.start(std::move(g));
        c.stream->listen(signal);  // a token that came before is found by the first look
        choices.push_back(std::move(c));
      }
    }
    offsets.assign(choices.size(), 0);
  }

  // Advances the choices with what their streams hold; calls on_delta(index, delta) for each choice
  // that produced something. Returns false once every choice is done.
  template <class OnDelta>
  bool pump(OnDelta on_delta) {
    size_t open = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
      if (choices[i].done) continue;
      auto u = choices[i].stream->wait(choices[i].seen, 0ms);
      if (!u.tokens.empty() || u.result) on_delta(i, take(choices[i], u));
      open += choices[i].done ? 0 : 1;
    }
    return open > 0;
  }

  void cancel(Choice& c) {
    c.stream->cancel();
    gateway.cancel(c.id);
  }

  void cancel_all() {
    for (auto& c : choices)
      if (!c.done) cancel(c);
  }

  Delta take(Choice& c, const TokenStream::Update& u) {
    Delta d;
    c.seen += u.tokens.size();
    const ServedModel& m = served();
    for (const auto& t : u.tokens) {
      if (c.done) break;
      std::string piece = m.piece(t.token);
      ++c.tokens;
      if (req.logprobs) {
        api::TokenLogprobs lp{piece, t.logprob, {}};
        for (const auto& alt : t.top) lp.top.push_back({m.piece(alt.token), alt.logprob});
        d.logprobs.push_back(lp);
      }
      auto out = c.stop.feed(piece);
      d.text += out.text;
      if (out.stopped) {
        // A stop string: the rest of the sequence is not wanted.
        cancel(c);
        c.done = true;
        c.finish = api::FinishReason::stop;
      }
    }
    if (u.result && !c.done) {
      c.done = true;
      c.result = *u.result;
      if (u.result->finish_reason == "error") {
        c.error = u.result->error;
      } else {
        d.text += c.stop.finish();
        c.finish = u.result->finish_reason == "length" ? api::FinishReason::length : api::FinishReason::stop;
      }
    }
    c.text += d.text;
    if (req.logprobs) c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    d.finished = c.done;
    return d;
  }

  api::Usage usage() const {
    api::Usage u;
    u.prompt_tokens = prompt_tokens;
    for (const auto& c : choices) u.completion_tokens += int64_t(c.tokens);
    return u;
  }
  // The first failed choice's error, if any.
  std::optional<std::string> error() const {
    for (const auto& c : choices)
      if (!c.error.empty()) return c.error;
    return std::nullopt;
  }
  // A choice refused on its way (GenerateResult::refused_status: a cluster node's own admission, the
  // router's breakers or overload guard), as the refusal this gateway's admission would give: the
  // client sees the limit and its reason, not a server error.
  std::optional<AdmissionRefusal> node_refusal() const {
    for (const auto& c : choices)
      if (c.result && c.result->refused_status != 0)
        return AdmissionRefusal{int(c.result->refused_status), int(std::max<uint32_t>(1, c.result->retry_after_s)),
                                c.result->refused_code.empty() ? "node_admission" : c.result->refused_code, c.result->error};
    return std::nullopt;
  }
  const std::string& prompt_text(size_t choice) const { return prompt_texts.at(choice / size_t(req.n)); }

  // The request's line in the traffic recording: arrival, shape and outcome (server/traffic_recorder.hpp).
  void record(TrafficRecorder& recorder, const std::string& how) const {
    RecordedRequest r;
    r.arrival = started;
    r.route = route == Route::generate ? "generate" : route == Route::chat_completions ? "chat" : "completions";
    r.model = served().name;
    r.stream = openai() && req.stream;
    r.n = openai() ? req.n : 1;
    for (size_t p = 0; p < prompts.size(); ++p) {
      r.prompt_tokens.push_back(int64_t(prompts[p].size()));
      r.max_tokens.push_back(p < max_new.size() ? int64_t(max_new[p]) : 0);
      if (recorder.keeps_text()) r.prompts.push_back(p < prompt_texts.size() ? prompt_texts[p] : "");
    }
    for (const auto& c : choices) r.completion_tokens.push_back(int64_t(c.tokens));
    const auto err = error();
    r.outcome = !how.empty() ? how : err ? "error" : "ok";
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    recorder.record(r);
  }

  // Echo with logprobs: an entry per prompt token, the first unscored (nothing predicts it), the others
  // as the engine scored them given the tokens before.
  std::vector<api::TokenLogprobs> prompt_logprobs(size_t choice) const {
    const ServedModel& m = served();
    const std::vector<int32_t>& prompt = prompts.at(choice / size_t(req.n));
    const std::vector<SampledToken> none;
    const std::vector<SampledToken>& scored = choices[choice].result ? choices[choice].result->prompt_logprobs : none;
    std::vector<api::TokenLogprobs> out;
    for (size_t k = 0; k < prompt.size(); ++k) {
      api::TokenLogprobs lp{m.piece(prompt[k]), 0, {}};
      if (k == 0 || k - 1 >= scored.size()) {
        lp.unscored = true;
      } else {
        lp.logprob = scored[k - 1].logprob;
        for (const auto& alt : scored[k - 1].top) lp.top.push_back({m.piece(alt.token), alt.logprob});
      }
      out.push_back(std::move(lp));
    }
    return out;
  }

  // --- Answering ---

  Reply answer_whole() {
    if (!openai()) {
      const Choice& c = choices.at(0);
      const GenerateResult r = c.result.value_or(GenerateResult::failed("", "cancelled"));
      if (auto no = node_refusal()) return refusal(*no);
      if (r.finish_reason == "error") return plain_error(gateway.accepting() ? 422 : 503, r.error, "generation_error");
      Reply out;
      out.body = json{{"tokens", r.tokens}, {"text", gateway.decode(r.tokens)}, {"finish_reason", r.finish_reason}, {"engine", r.engine}}
                     .dump(2, ' ', false, json::error_handler_t::replace);
      return out;
    }
    if (auto no = node_refusal()) return refusal(*no);
    if (auto e = error()) return api_error(server_error(gateway.accepting() ? 500 : 503, *e));
    std::vector<api::CompletionChoice> out_choices;
    for (size_t i = 0; i < choices.size(); ++i) {
      auto& c = choices[i];
      api::CompletionChoice out;
      out.text = req.echo ? prompt_text(i) + c.text : c.text;
      out.finish_reason = c.finish;
      out.has_logprobs = req.logprobs;
      if (req.echo && req.logprobs) {
        out.logprobs = prompt_logprobs(i);
        // The prompt's pieces may begin with a space its text lacks (SentencePiece's word start).
        std::string joined;
        for (const auto& t : out.logprobs) joined += t.token;
        if (joined.size() == prompt_text(i).size() + 1 && joined[0] == ' ' && joined.compare(1, std::string::npos, prompt_text(i)) == 0)
          out.leading_skip = 1;
      }
      out.logprobs.insert(out.logprobs.end(), std::make_move_iterator(c.logprobs.begin()), std::make_move_iterator(c.logprobs.end()));
      if (reads_tool_calls()) {
        api::ToolAnswer answer = api::parse_tool_answer(out.text, tool_format, id_rng);
        if (!answer.calls.empty()) {
          out.text = std::move(answer.content);
          out.tool_calls = std::move(answer.calls);
          // Cut by max_tokens (a further call begun, say), the answer says so.
          if (out.finish_reason != api::FinishReason::length) out.finish_reason = api::FinishReason::tool_calls;
        }
      }
      out_choices.push_back(std::move(out));
    }
    json body = req.endpoint == api::Endpoint::chat_completions ? api::chat_completion_response(meta, out_choices, usage())
                                                                : api::completion_response(meta, out_choices, usage());
    if (tells_route()) {
      // `model` names the model that answered (the first choice's); tokenhost.choices says how each was.
      json routes = json::array();
      for (const auto& c : choices) routes.push_back(c.result ? route_json(*c.result) : json(nullptr));
      if (!choices.empty() && choices[0].result && !choices[0].result->model.empty()) body["model"] = choices[0].result->model;
      body["tokenhost"] = {{"model", served().name}, {"choices", routes}};
    }
    Reply r;
    r.body = api::dump_json(body);
    return r;
  }

  Progress advance_whole() {
    Progress p;
    const bool more = pump([](size_t, const Delta&) {});
    if (more && std::chrono::steady_clock::now() - started > kAnswerLimit) {
      cancel_all();
      p.reply = openai() ? api_error(server_error(504, "the request did not finish within 10 minutes"))
                         : plain_error(504, "the request did not finish within 10 minutes", "generation_error");
      log_end("timed out");
    } else if (!more) {
      p.reply = answer_whole();
      log_end("");
    }
    p.done = p.reply.has_value();
    return p;
  }

  // A choice's last chunk says how it was answered (the chunks before name the model asked for).
  json with_route(json chunk, const Choice& c) const {
    if (c.done && c.result && tells_route()) chunk["tokenhost"] = route_json(*c.result);
    return chunk;
  }

  Progress advance_streaming() {
    Progress p;
    const bool chat = req.endpoint == api::Endpoint::chat_completions;
    std::string& out = p.events;
    for (size_t i = 0; i < choices.size(); ++i) {
      auto& c = choices[i];
      if (c.role_sent || !(chat || req.echo)) continue;
      if (chat) {
        out += api::sse_event(api::chat_role_chunk(meta, i));
      } else {
        out += api::sse_event(api::completion_chunk(meta, i, prompt_text(i)));
        offsets[i] += prompt_text(i).size();
      }
      c.role_sent = true;
    }
    const bool more = pump([&](size_t i, const Delta& d) {
      auto& c = choices[i];
      if (!c.error.empty()) return;
      const auto* lp = req.logprobs ? &d.logprobs : nullptr;
      if (chat && reads_tool_calls()) {
        // Whether the answer calls tools is known at its end: held until then, then its content and
        // its calls, each whole.
        if (!d.finished) return;
        api::ToolAnswer answer = api::parse_tool_answer(c.text, tool_format, id_rng);
        if (!answer.content.empty()) out += api::sse_event(api::chat_content_chunk(meta, i, answer.content, nullptr));
        if (!answer.calls.empty()) out += api::sse_event(api::chat_tool_calls_chunk(meta, i, answer.calls));
        const bool called = !answer.calls.empty() && c.finish != api::FinishReason::length;
        out += api::sse_event(with_route(api::chat_finish_chunk(meta, i, called ? api::FinishReason::tool_calls : c.finish), c));
      } else if (chat) {
        if (!d.text.empty() || (lp && !lp->empty())) out += api::sse_event(api::chat_content_chunk(meta, i, d.text, lp));
        if (d.finished) out += api::sse_event(with_route(api::chat_finish_chunk(meta, i, c.finish), c));
      } else {
        if (!d.text.empty() || (lp && !lp->empty()) || d.finished)
          out += api::sse_event(with_route(api::completion_chunk(meta, i, d.text, d.finished ? c.finish : api::FinishReason::none, lp, offsets[i]), c));
        offsets[i] += d.text.size();
      }
    });
    if (!more) {
      if (auto no = node_refusal()) {
        out += api::sse_event(refusal_error(*no).to_json());
      } else if (auto e = error()) {
        out += api::sse_event(server_error(gateway.accepting() ? 500 : 503, *e).to_json());
      } else if (req.include_usage) {
        out += api::sse_event(api::usage_chunk(meta, req.endpoint, usage()));
      }
      out += api::sse_done();
      p.done = true;
      log_end("");
    }
    return p;
  }

  // The request's end in the log: at debug level when it went as asked, at info when it failed.
  void log_end(const std::string& how) {
    finished = true;
    if (TrafficRecorder* recorder = gateway.recorder()) record(*recorder, how);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
    std::set<std::string> engine_set;  // each engine once (a name may contain another's)
    for (const auto& c : choices)
      if (c.result && !c.result->engine.empty()) engine_set.insert(c.result->engine);
    std::string engines;
    for (const auto& e : engine_set) engines += (engines.empty() ? "" : ",") + e;
    const auto err = error();
    const std::string end = !how.empty() ? how : err ? "failed: " + *err : "done";
    const auto level = (!how.empty() || err) ? spdlog::level::info : spdlog::level::debug;
    spdlog::log(level, "request {}: {} on model {} (engine {}), {} choice(s), {} prompt + {} completion tokens, {} ms: {}", caller.request_id,
                route_name(route), served().name, engines.empty() ? "-" : engines, choices.size(), usage().prompt_tokens,
                usage().completion_tokens, ms, end);
  }
};

ClientRequest::ClientRequest(std::unique_ptr<State> state) : s_(std::move(state)) {}

ClientRequest::~ClientRequest() {
  s_->cancel_all();
  if (s_->ticket) s_->ticket->set_used_tokens(uint64_t(s_->usage().prompt_tokens + s_->usage().completion_tokens));
}

std::variant<Reply, std::shared_ptr<ClientRequest>> ClientRequest::begin(Gateway& gateway, Route route, const std::string& body,
                                                                         Caller caller) {
  auto s = std::make_unique<State>(gateway, route, std::move(caller));
  if (auto refused = route == Route::generate ? s->parse_generate(body) : s->parse_openai(body)) {
    spdlog::debug("request {}: {} refused ({}): {}", s->caller.request_id, route_name(route), refused->status, refused->body);
    return *refused;
  }
  auto admitted = gateway.admit(s->ask());
  if (auto* no = std::get_if<AdmissionRefusal>(&admitted)) {
    spdlog::debug("request {}: {} not admitted ({}): {}", s->caller.request_id, route_name(route), no->http_status, no->message);
    return refusal(*no);
  }
  s->ticket = std::get<std::shared_ptr<AdmissionTicket>>(std::move(admitted));
  s->start();
  return std::shared_ptr<ClientRequest>(new ClientRequest(std::move(s)));
}

const std::string& ClientRequest::id() const { return s_->caller.request_id; }
bool ClientRequest::streaming() const { return s_->openai() && s_->req.stream; }
const std::shared_ptr<StreamSignal>& ClientRequest::signal() const { return s_->signal; }

ClientRequest::Progress ClientRequest::advance() {
  if (s_->finished) return Progress{{}, std::nullopt, true};
  return streaming() ? s_->advance_streaming() : s_->advance_whole();
}

void ClientRequest::abandon(const std::string& why) {
  if (s_->finished) return;
  s_->cancel_all();
  s_->log_end("cancelled: client " + s_->caller.address + " " + why);
}

}  // namespace tokenhost::request
