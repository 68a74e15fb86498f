// A tokenhost server with its HTTP front doors on system-chosen ports, serving stories260K, and a
// small client for the OpenAI endpoints (whole answers and server-sent event streams).
#pragma once

#include <cctype>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/http_client.hpp"
#include "http/http_servers.hpp"
#include "models.hpp"
#include "test_server.hpp"

namespace tokenhost::testing {

// stories260K on the CPU (context 512) with cpu_flash attention.
inline std::string stories_manifest(const std::string& scheduler = "scheduler.continuous", uint32_t n_blocks = 512,
                                    uint32_t max_step_seqs = 64, int http_threads = 128) {
  return R"(
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"
log_level = "warn"
http_threads = )" + std::to_string(http_threads) + R"(

[models.stories]
source = "gguf"
path = ")" + require_model_file("stories260K.gguf") + R"("

[engines.main]
model = "stories"
max_step_tokens = 512
max_step_seqs = )" + std::to_string(max_step_seqs) + R"(
attention = { plugin = "attention.cpu_flash" }
kvcache = { plugin = "kvcache.paged", config = { block_size = 16, n_blocks = )" + std::to_string(n_blocks) + R"( } }
scheduler = { plugin = ")" + scheduler + R"(" }
)";
}

struct LiveServer {
  std::unique_ptr<Server> server;
  std::unique_ptr<HttpServers> http;
  explicit LiveServer(const std::string& manifest) {
    server = std::make_unique<Server>(read_deployment("test.toml", manifest));
    http = std::make_unique<HttpServers>(*server);
    http->start();
  }
  ~LiveServer() {
    server->drain(std::chrono::seconds(5));
    http->stop();
    server->stop();
  }
  HttpClient client() const {
    HttpClientOptions options;
    options.read_timeout = std::chrono::seconds(120);
    return HttpClient("127.0.0.1", http->gateway_port(), std::move(options));
  }
  nlohmann::json engine_status() { return server->status()["engines"][0]; }
};

struct Answer {
  int status = 0;
  nlohmann::json body;
  std::map<std::string, std::string> headers;  // names lower-cased
};

using Headers = HttpHeaders;

inline Answer post(const LiveServer& s, const std::string& path, const std::string& body, const Headers& headers = {}) {
  HttpClientRequest req;
  req.method = "POST";
  req.target = path;
  req.content_type = "application/json";
  req.headers = headers;
  req.body = body;
  auto r = s.client().request(req);
  if (!r.ok()) return {0, nullptr, {}};
  Answer a{r.status, nlohmann::json::parse(r.body, nullptr, false), {}};
  for (const auto& [k, v] : r.headers) {
    std::string name = k;
    for (auto& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    a.headers[name] = v;
  }
  return a;
}

// A streamed completion read event by event. stop_after_events > 0: the client hangs up after that
// many events (a client that goes away).
struct Streamed {
  int status = 0;
  std::string text;                // every choice's text, in the order it came
  std::vector<std::string> texts;  // by choice index
  std::string finish_reason;
  size_t events = 0;
  bool done = false;  // saw data: [DONE]
  nlohmann::json usage;
  std::string error;
  double first_text_s = -1;  // from sending the request to the first event with text; -1 none
};

inline Streamed stream(const LiveServer& s, const std::string& path, nlohmann::json body, size_t stop_after_events = 0,
                       const Headers& headers = {}) {
  body["stream"] = true;
  Streamed out;
  std::string buffer;
  HttpClientRequest req;
  req.method = "POST";
  req.target = path;
  req.content_type = "application/json";
  req.headers = headers;
  const auto sent = std::chrono::steady_clock::now();
  req.body = body.dump();
  auto read = [&](const HttpClientResult&, std::string_view data) {
    buffer.append(data);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      std::string event = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // comments (keep-alive)
      std::string payload = event.substr(6);
      ++out.events;
      if (payload == "[DONE]") {
        out.done = true;
        continue;
      }
      auto j = nlohmann::json::parse(payload);
      if (j.contains("error")) out.error = j["error"]["message"];
      if (j.contains("usage") && !j["usage"].is_null()) out.usage = j["usage"];
      for (const auto& ch : j.value("choices", nlohmann::json::array())) {
        std::string piece;
        if (ch.contains("text")) piece += ch["text"].get<std::string>();
        if (ch.contains("delta") && ch["delta"].contains("content")) piece += ch["delta"]["content"].get<std::string>();
        out.text += piece;
        if (!piece.empty() && out.first_text_s < 0)
          out.first_text_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
        const size_t index = ch.value("index", 0);
        if (out.texts.size() <= index) out.texts.resize(index + 1);
        out.texts[index] += piece;
        if (!ch["finish_reason"].is_null()) out.finish_reason = ch["finish_reason"];
      }
      if (stop_after_events > 0 && out.events >= stop_after_events) return false;
    }
    return true;
  };
  out.status = s.client().stream(req, read).status;
  return out;
}

}  // namespace tokenhost::testing
