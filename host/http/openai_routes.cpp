#include "http/openai_routes.hpp"

#include <chrono>
#include <memory>
#include <mutex>
#include <random>

#include <spdlog/spdlog.h>

#include "api/client_json.hpp"
#include "api/openai_request.hpp"
#include "api/openai_response.hpp"
#include "api/stop_strings.hpp"
#include "http/exchange_pump.hpp"
#include "model/tokenizer.hpp"
#include "server/server.hpp"

namespace tokenhost {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

void reply_error(HttpResponse& res, const api::ApiError& e) {
  res.status = e.http_status;
  res.set_content(api::dump_json(e.to_json()), "application/json");
}

api::ApiError server_error(int status, const std::string& message) {
  api::ApiError e;
  e.http_status = status;
  e.message = message;
  e.type = status == 503 ? "service_unavailable" : "server_error";
  return e;
}

// Seeds for requests that bring none, and response ids.
uint64_t draw_seed() {
  static std::mutex m;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(m);
  return rng();
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
};

// What one update of a choice produced: text now safe to send and the logprobs of its tokens.
struct Delta {
  std::string text;
  std::vector<api::TokenLogprobs> logprobs;
  bool finished = false;
};

// One HTTP request: its choices and how to advance them. Shared between the handler and, when
// streaming, the AsyncAnswer that writes it (which runs after the handler returns).
class Generation {
 public:
  Generation(Server& server, api::OpenAIRequest request, const ServedModel& model)
      : server_(server), req_(std::move(request)), model_(model) {
    std::mt19937_64 rng(draw_seed());
    meta_ = api::make_response_meta(req_.endpoint, model_.name, rng);
    meta_.include_usage = req_.include_usage;
  }
  ~Generation() {
    cancel_all();
    if (ticket_) ticket_->set_used_tokens(uint64_t(usage().prompt_tokens + usage().completion_tokens));
  }

  // Changes whenever any choice's stream does.
  const std::shared_ptr<StreamSignal>& signal() const { return signal_; }

  // Tokenizes and checks the prompts; on success the request is ready to start.
  std::optional<api::ApiError> prepare() {
    if (req_.endpoint == api::Endpoint::chat_completions) {
      api::ChatRenderOptions opts;
      if (const Tokenizer* t = model_.tokenizer) {
        if (t->bos() >= 0) opts.bos_token = t->spec().tokens.at(size_t(t->bos()));
        if (t->eos() >= 0) opts.eos_token = t->spec().tokens.at(size_t(t->eos()));
      }
      auto rendered = api::render_chat(req_.messages, model_.chat_template, opts);
      if (!rendered) return rendered.error();
      if (!rendered->template_recognized)
        spdlog::warn("model {}: chat template not recognized; rendering messages as plain 'role: content' lines", model_.name);
      prompts_.push_back(model_.encode(rendered->text, !rendered->includes_bos, true));
      prompt_texts_.push_back(rendered->text);
    } else {
      for (size_t p = 0; p < req_.prompts.size(); ++p) {
        const auto& prompt = req_.prompts[p];
        if (prompt.is_tokens) {
          for (size_t i = 0; i < prompt.tokens.size(); ++i) {
            if (prompt.tokens[i] < 0 || uint32_t(prompt.tokens[i]) >= model_.vocab_size)
              return api::invalid_request("prompt", "token " + std::to_string(prompt.tokens[i]) + " at position " +
                                                        std::to_string(i) + " is outside the vocabulary of model " +
                                                        model_.name + " (" + std::to_string(model_.vocab_size) + " tokens)");
          }
          prompts_.push_back(prompt.tokens);
          std::string text;
          for (int32_t t : prompt.tokens) text += model_.piece(t);
          prompt_texts_.push_back(text);
        } else {
          prompts_.push_back(model_.encode(prompt.text, true, true));
          prompt_texts_.push_back(prompt.text);
        }
      }
    }
    for (const auto& [token, bias] : req_.logit_bias)
      if (uint32_t(token) >= model_.vocab_size)
        return api::invalid_request("logit_bias." + std::to_string(token), "token " + std::to_string(token) +
                                                                          " is outside the vocabulary of model " + model_.name + " (" +
                                                                          std::to_string(model_.vocab_size) + " tokens)");
    const std::string param = req_.endpoint == api::Endpoint::chat_completions ? "messages" : "prompt";
    for (const auto& p : prompts_) {
      if (p.empty()) return api::invalid_request(param, "the prompt is empty");
      // A sliding window bounds no request: the prompt is taken whole, and without max_tokens the output
      // is bounded as a fresh context would be.
      const int64_t context = model_.window_cap > 0 ? int64_t(p.size()) + std::max<int64_t>(model_.context_len, req_.max_tokens.value_or(0))
                                                    : int64_t(model_.context_len);
      auto n = api::check_context(int64_t(p.size()), req_.max_tokens, context, param,
                                  int64_t(server_.limits().default_max_tokens));
      if (!n) return n.error();
      max_new_.push_back(uint32_t(n.value()));
      prompt_tokens_ += int64_t(p.size());
    }
    return std::nullopt;
  }

  // What the request asks of the gateway's admission (server/admission.hpp), once prepared.
  AdmissionAsk ask(const std::string& client) const {
    AdmissionAsk a;
    a.client = client;
    a.model = model_.name;
    for (size_t p = 0; p < prompts_.size(); ++p) {
      a.sequences += uint32_t(req_.n);
      a.tokens += uint64_t(req_.n) * (prompts_[p].size() + max_new_[p]);
      const uint64_t held = prompts_[p].size() + max_new_[p];  // a window holds its cap at most
      a.kv_tokens += uint64_t(req_.n) * (model_.window_cap > 0 ? std::min<uint64_t>(held, model_.window_cap) : held);
    }
    return a;
  }
  // Held until the generation ends: its sequences and KV demand count against the limits till then.
  void hold(std::shared_ptr<AdmissionTicket> ticket) { ticket_ = std::move(ticket); }

  void start(const std::string& session_key, const std::string& api_key, const std::string& client) {
    const uint64_t seed = draw_seed();
    for (size_t p = 0; p < prompts_.size(); ++p) {
      for (int64_t k = 0; k < req_.n; ++k) {
        GenerateRequest g;
        g.id = server_.next_request_id();
        g.prompt = prompts_[p];
        g.max_tokens = max_new_[p];
        g.priority = int32_t(req_.priority);
        g.session_key = session_key;
        g.user = req_.user;
        g.api_key = api_key;
        g.client = client;
        g.arm = req_.arm;
        g.request_class = req_.request_class;
        g.model = model_.name;
        g.sampling = api::sampling_params(req_, seed);
        g.sampling.seed += uint64_t(k);  // n choices of one seeded request differ, reproducibly
        g.logprobs = req_.logprobs;
        g.ignore_eos = ignore_eos_;
        if (req_.max_draft) g.max_draft = *req_.max_draft;
        g.cache_salt = req_.cache_salt;
        Choice c;
        c.id = g.id;
        c.stop = api::StopMatcher(req_.stop);
        c.stream = server_.start(std::move(g));
        c.stream->listen(signal_);  // a token that came before is found by pump()'s first look
        choices_.push_back(std::move(c));
      }
    }
  }

  void set_ignore_eos(bool on) { ignore_eos_ = on; }

  // Advances the choices with what their streams hold, waiting up to `timeout` when nothing is new.
  // Calls on_delta(index, delta) for each choice that produced something. Returns false once every
  // choice is done.
  template <class OnDelta>
  bool pump(std::chrono::milliseconds timeout, OnDelta on_delta) {
    bool any = false, open = false;
    const uint64_t version = signal_->version();  // before looking: a change after it wakes the wait
    size_t waiting_on = choices_.size();
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (choices_[i].done) continue;
      open = true;
      if (waiting_on == choices_.size()) waiting_on = i;
      auto u = choices_[i].stream->wait(choices_[i].seen, 0ms);
      if (u.tokens.empty() && !u.result) continue;
      any = true;
      on_delta(i, advance(choices_[i], u));
    }
    if (!open) return false;
    if (!any && unfinished() > 1) {
      // Nothing new anywhere: sleep until any choice changes, then take what each has (the server's
      // wait with no time left also finishes a choice whose server has stopped).
      signal_->wait(version, timeout);
      for (size_t i = 0; i < choices_.size(); ++i) {
        if (choices_[i].done) continue;
        auto u = server_.wait(*choices_[i].stream, choices_[i].seen, 0ms);
        if (!u.tokens.empty() || u.result) on_delta(i, advance(choices_[i], u));
      }
    } else if (!any) {
      Choice& c = choices_[waiting_on];
      auto u = server_.wait(*c.stream, c.seen, timeout);
      if (!u.tokens.empty() || u.result) on_delta(waiting_on, advance(c, u));
    }
    return unfinished() > 0;
  }

  void cancel_all() {
    for (auto& c : choices_) {
      if (c.done) continue;
      c.stream->cancel();
      server_.cancel(c.id);
    }
  }

  const api::OpenAIRequest& request() const { return req_; }
  const api::ResponseMeta& meta() const { return meta_; }
  std::vector<Choice>& choices() { return choices_; }
  const std::string& prompt_text(size_t choice) const { return prompt_texts_.at(choice / size_t(req_.n)); }
  api::Usage usage() const {
    api::Usage u;
    u.prompt_tokens = prompt_tokens_;
    for (const auto& c : choices_) u.completion_tokens += int64_t(c.tokens);
    return u;
  }
  // The first failed choice's error, if any.
  std::optional<std::string> error() const {
    for (const auto& c : choices_)
      if (!c.error.empty()) return c.error;
    return std::nullopt;
  }

 private:
  size_t unfinished() const {
    size_t n = 0;
    for (const auto& c : choices_) n += c.done ? 0 : 1;
    return n;
  }

  Delta advance(Choice& c, const TokenStream::Update& u) {
    Delta d;
    c.seen += u.tokens.size();
    for (const auto& t : u.tokens) {
      if (c.done) break;
      std::string piece = model_.piece(t.token);
      ++c.tokens;
      if (req_.logprobs) {
        api::TokenLogprobs lp{piece, t.logprob, {}};
        for (const auto& alt : t.top) lp.top.push_back({model_.piece(alt.token), alt.logprob});
        d.logprobs.push_back(lp);
      }
      auto out = c.stop.feed(piece);
      d.text += out.text;
      if (out.stopped) {
        // A stop string: the rest of the sequence is not wanted.
        c.stream->cancel();
        server_.cancel(c.id);
        c.done = true;
        c.finish = api::FinishReason::stop;
      }
    }
    if (u.result && !c.done) {
      c.done = true;
      if (u.result->finish_reason == "error") {
        c.error = u.result->error;
      } else {
        d.text += c.stop.finish();
        c.finish = u.result->finish_reason == "length" ? api::FinishReason::length : api::FinishReason::stop;
      }
    }
    c.text += d.text;
    if (req_.logprobs) c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    d.finished = c.done;
    return d;
  }

  Server& server_;
  api::OpenAIRequest req_;
  const ServedModel& model_;
  api::ResponseMeta meta_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<std::string> prompt_texts_;
  std::vector<uint32_t> max_new_;
  int64_t prompt_tokens_ = 0;
  bool ignore_eos_ = false;
  std::vector<Choice> choices_;
  std::shared_ptr<StreamSignal> signal_ = std::make_shared<StreamSignal>();  // any choice's change
  std::shared_ptr<AdmissionTicket> ticket_;
};

// Answers one Generation without holding a thread (ExchangePump): on the connection's strand it takes
// what is new and writes it (streaming: server-sent events as tokens come) or, once every choice is
// done, the whole body. The client leaving (seen by the socket), a stream it reads too slowly, or a
// stopped server cancel every choice, and the engines free their blocks.
class AsyncAnswer : public std::enable_shared_from_this<AsyncAnswer> {
 public:
  AsyncAnswer(std::shared_ptr<Generation> g, Server& server, std::shared_ptr<HttpExchange> exchange)
      : g_(std::move(g)), server_(server), ex_(std::move(exchange)) {
    offsets_.assign(g_->choices().size(), 0);
  }

  void start() {
    std::weak_ptr<AsyncAnswer> weak = weak_from_this();
    ex_->on_gone([weak] {
      if (auto self = weak.lock()) {
        const auto& r = self->ex_->request();
        spdlog::info("client {}:{} closed its connection before the answer: request cancelled", r.remote_addr, r.remote_port);
        self->g_->cancel_all();
      }
    });
    if (g_->request().stream) {
      HttpResponse head;
      head.content_type = "text/event-stream";
      head.set_header("Cache-Control", "no-cache");
      ex_->start_stream(std::move(head));
    }
    ExchangePump::start(ex_, g_->signal(), [self = shared_from_this()] {
      self->step();
      return self->finished_;
    }, kTick);
  }

 private:
  static constexpr std::chrono::milliseconds kTick{250};
  static constexpr std::chrono::minutes kLimit{10};

  void step() {
    if (finished_) return;
    if (ex_->gone()) {
      g_->cancel_all();
      finished_ = true;
      return;
    }
    if (g_->request().stream) return step_streaming();
    const bool more = g_->pump(0ms, [](size_t, const Delta&) {});
    if (more && std::chrono::steady_clock::now() - started_ > kLimit) {
      g_->cancel_all();
      finished_ = true;
      return reply_error(server_error(504, "the request did not finish within 10 minutes"));
    }
    if (!more) {
      finished_ = true;
      answer_whole();
    }
  }

  void reply_error(const api::ApiError& e) {
    HttpResponse res;
    res.status = e.http_status;
    res.set_content(api::dump_json(e.to_json()), "application/json");
    ex_->reply(std::move(res));
  }

  void answer_whole() {
    if (auto e = g_->error()) return reply_error(server_error(server_.accepting() ? 500 : 503, *e));
    std::vector<api::CompletionChoice> choices;
    for (size_t i = 0; i < g_->choices().size(); ++i) {
      auto& c = g_->choices()[i];
      api::CompletionChoice out;
      out.text = g_->request().echo ? g_->prompt_text(i) + c.text : c.text;
      out.finish_reason = c.finish;
      out.has_logprobs = g_->request().logprobs;
      out.logprobs = std::move(c.logprobs);
      choices.push_back(std::move(out));
    }
    json body = g_->request().endpoint == api::Endpoint::chat_completions
                    ? api::chat_completion_response(g_->meta(), choices, g_->usage())
                    : api::completion_response(g_->meta(), choices, g_->usage());
    HttpResponse res;
    res.set_content(api::dump_json(body), "application/json");
    ex_->reply(std::move(res));
  }

  void step_streaming() {
    const auto& req = g_->request();
    const bool chat = req.endpoint == api::Endpoint::chat_completions;
    std::string out;
    for (size_t i = 0; i < g_->choices().size(); ++i) {
      auto& c = g_->choices()[i];
      if (c.role_sent || !(chat || req.echo)) continue;
      if (chat) {
        out += api::sse_event(api::chat_role_chunk(g_->meta(), i));
      } else {
        out += api::sse_event(api::completion_chunk(g_->meta(), i, g_->prompt_text(i)));
        offsets_[i] += g_->prompt_text(i).size();
      }
      c.role_sent = true;
    }
    const bool more = g_->pump(0ms, [&](size_t i, const Delta& d) {
      auto& c = g_->choices()[i];
      if (!c.error.empty()) return;
      const auto* lp = req.logprobs ? &d.logprobs : nullptr;
      if (chat) {
        if (!d.text.empty() || (lp && !lp->empty())) out += api::sse_event(api::chat_content_chunk(g_->meta(), i, d.text, lp));
        if (d.finished) out += api::sse_event(api::chat_finish_chunk(g_->meta(), i, c.finish));
      } else {
        if (!d.text.empty() || (lp && !lp->empty()) || d.finished)
          out += api::sse_event(api::completion_chunk(g_->meta(), i, d.text, d.finished ? c.finish : api::FinishReason::none,
                                                      lp, offsets_[i]));
        offsets_[i] += d.text.size();
      }
    });
    if (!more) {
      if (auto e = g_->error()) {
        out += api::sse_event(server_error(server_.accepting() ? 500 : 503, *e).to_json());
      } else if (req.include_usage) {
        out += api::sse_event(api::usage_chunk(g_->meta(), req.endpoint, g_->usage()));
      }
      out += api::sse_done();
    }
    const auto now = std::chrono::steady_clock::now();
    // A comment line when nothing was sent for a while: SSE clients ignore it, and proxies between
    // keep the connection open during a long prefill.
    if (out.empty() && now - last_write_ > 1s) out = ": keep-alive\n\n";
    if (!out.empty()) {
      if (!ex_->write(std::move(out))) {  // gone, or reading too slowly: the bound of unsent bytes passed
        g_->cancel_all();
        finished_ = true;
        return;
      }
      last_write_ = now;
    }
    if (!more) {
      finished_ = true;
      ex_->end_stream();
    }
  }

  std::shared_ptr<Generation> g_;
  Server& server_;
  std::shared_ptr<HttpExchange> ex_;
  bool finished_ = false;        // on the strand only
  std::vector<size_t> offsets_;  // completions' text_offset per choice
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_write_ = started_;
};

// Parses and starts a request. Returns false with res holding the answer (an error), or true once an
// AsyncAnswer has taken the exchange.
bool begin(Server& server, api::Endpoint endpoint, const std::shared_ptr<HttpExchange>& ex, HttpResponse& res) {
  const HttpRequest& http = ex->request();
  auto read = api::parse_client_json(http.body);
  if (!read) return reply_error(res, read.error()), false;
  json body = std::move(read.value());
  if (!server.accepting()) return reply_error(res, server_error(503, "the server is shutting down")), false;
  auto parsed = api::parse_request(endpoint, body);
  if (!parsed) return reply_error(res, parsed.error()), false;
  const ServedModel* model = server.find_model(parsed->model);
  if (model == nullptr) {
    std::string names;
    for (const auto& m : server.models()) names += (names.empty() ? "" : ", ") + m.name;
    api::ApiError e = api::invalid_request("model", "model '" + parsed->model + "' does not exist; this server serves: " + names,
                                           "model_not_found");
    e.http_status = 404;
    return reply_error(res, e), false;
  }
  // vLLM's and llama.cpp's extension for benchmarks: generate max_tokens whatever the model says.
  bool ignore_eos = false;
  if (auto it = body.find("ignore_eos"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return reply_error(res, api::invalid_request("ignore_eos", "'ignore_eos' must be a boolean, got " + std::string(it->type_name()))), false;
    ignore_eos = it->get<bool>();
  }
  if (!parsed->arm.empty()) {
    // Refused here, before anything starts, rather than as a failed generation.
    if (std::string why = server.check_arm_choice(model->name, parsed->arm); !why.empty())
      return reply_error(res, api::invalid_request("tokenhost.arm", why, "arm_not_available")), false;
  }
  auto g = std::make_shared<Generation>(server, std::move(parsed.value()), *model);
  g->set_ignore_eos(ignore_eos);
  if (auto e = g->prepare()) return reply_error(res, *e), false;
  const std::string client = gateway_client(http, server.deployment().server);
  auto admitted = server.admit(g->ask(client));
  if (auto* refusal = std::get_if<AdmissionRefusal>(&admitted)) return reply_refusal(res, *refusal), false;
  g->hold(std::get<std::shared_ptr<AdmissionTicket>>(std::move(admitted)));
  std::string session = http.header("X-Session-Key");
  if (session.empty()) session = g->request().user;
  g->start(session, bearer_token(http), client);
  std::make_shared<AsyncAnswer>(std::move(g), server, ex)->start();
  return true;
}

void handle(Server& server, api::Endpoint endpoint, const std::shared_ptr<HttpExchange>& ex) {
  HttpResponse res;
  if (!begin(server, endpoint, ex, res)) ex->reply(std::move(res));
}

}  // namespace

std::string bearer_token(const HttpRequest& req) {
  const std::string auth = req.header("Authorization");
  return auth.rfind("Bearer ", 0) == 0 ? auth.substr(7) : std::string();
}

std::string gateway_client(const HttpRequest& req, const ServerDecl& server) {
  // Without configured keys a bearer token proves nothing: a client could send a new one per request.
  if (!server.api_keys.empty()) return "key:" + bearer_token(req);
  return "addr:" + req.remote_addr;
}

void reply_refusal(HttpResponse& res, const AdmissionRefusal& refusal) {
  api::ApiError e;
  e.http_status = refusal.http_status;
  e.message = refusal.message;
  e.type = refusal.http_status == 429 ? "rate_limit_error" : "service_unavailable";
  e.code = refusal.code;
  reply_error(res, e);
  res.set_header("Retry-After", std::to_string(refusal.retry_after_s));
}

void add_openai_routes(HttpListener& gateway, Server& server) {
  gateway.route_async("POST", "/v1/completions", [&server](std::shared_ptr<HttpExchange> ex) {
    handle(server, api::Endpoint::completions, ex);
  });
  gateway.route_async("POST", "/v1/chat/completions", [&server](std::shared_ptr<HttpExchange> ex) {
    handle(server, api::Endpoint::chat_completions, ex);
  });
  gateway.route("GET", "/v1/models", [&server](const HttpRequest&, HttpResponse& res) {
    std::vector<api::ModelCard> cards;
    for (const auto& m : server.models()) cards.push_back({m.name, m.created, "tokenhost"});
    res.set_content(api::dump_json(api::models_list(cards)), "application/json");
  });
  gateway.route("GET", R"(/v1/models/([^/]+))", [&server](const HttpRequest& req, HttpResponse& res) {
    const ServedModel* m = server.find_model(req.matches[1]);
    if (m == nullptr || req.matches[1].length() == 0) {
      api::ApiError e = api::invalid_request("model", "model '" + std::string(req.matches[1]) + "' does not exist", "model_not_found");
      e.http_status = 404;
      return reply_error(res, e);
    }
    res.set_content(api::dump_json(api::models_list({{m->name, m->created, "tokenhost"}})["data"][0]), "application/json");
  });
}

}  // namespace tokenhost
