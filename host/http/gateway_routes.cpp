#include "http/gateway_routes.hpp"

#include <chrono>
#include <memory>

#include <spdlog/spdlog.h>

#include "api/api_error.hpp"
#include "api/openai_response.hpp"
#include "http/exchange_pump.hpp"
#include "manifest/deployment.hpp"
#include "request/client_request.hpp"
#include "request/embeddings_request.hpp"
#include "server/gateway.hpp"

namespace tokenhost {
namespace {

using namespace std::chrono_literals;

HttpResponse to_http(request::Reply reply) {
  HttpResponse res;
  res.status = reply.status;
  res.set_content(std::move(reply.body), std::move(reply.content_type));
  res.headers = std::move(reply.headers);
  return res;
}

// Writes one started request's answer without holding a thread (ExchangePump): on the connection's
// strand it takes what is new and writes it (streaming: the events as tokens come) or, once done, the
// whole answer. The client leaving (seen by the socket) or reading a stream too slowly abandons the
// request, and the engines free its blocks.
class AsyncAnswer : public std::enable_shared_from_this<AsyncAnswer> {
 public:
  AsyncAnswer(std::shared_ptr<request::ClientRequest> r, std::shared_ptr<HttpExchange> exchange)
      : r_(std::move(r)), ex_(std::move(exchange)) {}

  void start() {
    std::weak_ptr<AsyncAnswer> weak = weak_from_this();
    ex_->on_gone([weak] {
      if (auto self = weak.lock()) self->r_->abandon("closed its connection before the answer");
    });
    if (r_->streaming()) {
      HttpResponse head;
      head.content_type = "text/event-stream";
      head.set_header("Cache-Control", "no-cache");
      ex_->start_stream(std::move(head));
    }
    ExchangePump::start(ex_, r_->signal(), [self = shared_from_this()] {
      self->step();
      return self->finished_;
    }, kTick);
  }

 private:
  static constexpr std::chrono::milliseconds kTick{250};

  void step() {
    if (finished_) return;
    if (ex_->gone()) {
      r_->abandon("closed its connection before the answer");
      finished_ = true;
      return;
    }
    auto p = r_->advance();
    if (!r_->streaming()) {
      if (p.reply) {
        finished_ = true;
        ex_->reply(to_http(std::move(*p.reply)));
      }
      return;
    }
    std::string out = std::move(p.events);
    const auto now = std::chrono::steady_clock::now();
    // A comment line when nothing was sent for a while: SSE clients ignore it, and proxies between
    // keep the connection open during a long prefill.
    if (out.empty() && !p.done && now - last_write_ > 1s) out = ": keep-alive\n\n";
    if (!out.empty()) {
      if (!ex_->write(std::move(out))) {  // gone, or reading too slowly: the bound of unsent bytes passed
        r_->abandon("is gone or reads its stream too slowly");
        finished_ = true;
        return;
      }
      last_write_ = now;
    }
    if (p.done) {
      finished_ = true;
      ex_->end_stream();
    }
  }

  std::shared_ptr<request::ClientRequest> r_;
  std::shared_ptr<HttpExchange> ex_;
  bool finished_ = false;  // on the strand only
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
};

// Starts the request the exchange carries, or answers its refusal.
void serve(Gateway& gateway, const ServerDecl& server, request::Route route, const std::shared_ptr<HttpExchange>& ex) {
  const HttpRequest& http = ex->request();
  request::Caller caller;
  caller.request_id = http.id;
  caller.session_key = http.header("X-Session-Key");
  caller.api_key = bearer_token(http);
  caller.client = gateway_client(http, server);
  caller.address = http.remote_addr + ":" + std::to_string(http.remote_port);
  auto begun = request::ClientRequest::begin(gateway, route, http.body, std::move(caller));
  if (auto* refused = std::get_if<request::Reply>(&begun)) return ex->reply(to_http(std::move(*refused)));
  std::make_shared<AsyncAnswer>(std::get<std::shared_ptr<request::ClientRequest>>(std::move(begun)), ex)->start();
}

void reply_model_not_found(HttpResponse& res, const std::string& name) {
  api::ApiError e = api::invalid_request("model", "model '" + name + "' does not exist", "model_not_found");
  e.http_status = 404;
  res.status = e.http_status;
  res.set_content(api::dump_json(e.to_json()), "application/json");
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

void add_gateway_routes(HttpListener& listener, Gateway& gateway, const ServerDecl& server) {
  const std::pair<const char*, request::Route> routes[] = {{"/v1/completions", request::Route::completions},
                                                           {"/v1/chat/completions", request::Route::chat_completions},
                                                           {"/v1/generate", request::Route::generate}};
  for (const auto& [path, route] : routes)
    // Parsing, admission and tokenizing start on a handler thread: a large body never holds an I/O thread.
    listener.route_async(
        "POST", path, [&gateway, &server, route = route](std::shared_ptr<HttpExchange> ex) { serve(gateway, server, route, ex); },
        HttpListener::StartOn::handler_thread);
  listener.route_async(
      "POST", "/v1/embeddings",
      [&gateway, &server](std::shared_ptr<HttpExchange> ex) {
        const HttpRequest& http = ex->request();
        request::Caller caller;
        caller.request_id = http.id;
        caller.api_key = bearer_token(http);
        caller.client = gateway_client(http, server);
        caller.address = http.remote_addr + ":" + std::to_string(http.remote_port);
        ex->reply(to_http(request::embeddings(gateway, http.body, caller)));
      },
      HttpListener::StartOn::handler_thread);
  listener.route("GET", "/v1/models", [&gateway](const HttpRequest&, HttpResponse& res) {
    std::vector<api::ModelCard> cards;
    for (const auto& m : gateway.models())  // public names: a group's members answer by name but are not listed
      if (m.listed) cards.push_back({m.id(), m.created, "tokenhost", m.context_len});
    res.set_content(api::dump_json(api::models_list(cards)), "application/json");
  });
  listener.route("GET", R"(/v1/models/([^/]+))", [&gateway](const HttpRequest& req, HttpResponse& res) {
    const ServedModel* m = gateway.find_model(req.matches[1]);
    if (m == nullptr || req.matches[1].length() == 0) return reply_model_not_found(res, req.matches[1]);
    res.set_content(api::dump_json(api::models_list({{m->id(), m->created, "tokenhost", m->context_len}})["data"][0]), "application/json");
  });
}

}  // namespace tokenhost
