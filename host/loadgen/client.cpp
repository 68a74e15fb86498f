#include "loadgen/client.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "loadgen/openai.hpp"
#include "loadgen/sse.hpp"

namespace tokenhost::loadgen {

Target parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) throw std::invalid_argument("'" + url + "': https is not supported (use http://)");
  if (url.rfind(scheme, 0) != 0) throw std::invalid_argument("'" + url + "': expected http://HOST[:PORT][/PREFIX]");
  std::string rest = url.substr(scheme.size());
  Target t;
  auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) t.base_path = rest.substr(slash);
  while (!t.base_path.empty() && t.base_path.back() == '/') t.base_path.pop_back();
  if (t.base_path.size() >= 3 && t.base_path.compare(t.base_path.size() - 3, 3, "/v1") == 0)
    t.base_path.resize(t.base_path.size() - 3);
  auto colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    std::string port = authority.substr(colon + 1);
    authority.resize(colon);
    int p = 0;
    try {
      size_t used = 0;
      p = std::stoi(port, &used);
      if (used != port.size()) p = -1;
    } catch (const std::exception&) {
      p = -1;
    }
    if (p < 1 || p > 65535) throw std::invalid_argument("'" + url + "': '" + port + "' is not a port number");
    t.port = p;
  }
  if (authority.size() >= 2 && authority.front() == '[' && authority.back() == ']') authority = authority.substr(1, authority.size() - 2);
  if (authority.empty()) throw std::invalid_argument("'" + url + "': no host");
  t.host = authority;
  return t;
}

namespace {

std::unique_ptr<httplib::Client> connect(const EndpointOptions& o, const Target& t) {
  auto c = std::make_unique<httplib::Client>(t.host, t.port);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);  // small requests go out at once (no Nagle delay)
  c->set_connection_timeout(10, 0);
  auto secs = time_t(o.timeout_s);
  c->set_read_timeout(secs, long(1e6 * (o.timeout_s - double(secs))));
  c->set_write_timeout(secs, 0);
  return c;
}

httplib::Headers headers(const EndpointOptions& o) {
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

std::string transport_error(const EndpointOptions& o, httplib::Error e) {
  if (e == httplib::Error::Connection) return "cannot connect to " + o.url + " (is a server listening there?)";
  if (e == httplib::Error::ConnectionTimeout) return "cannot connect to " + o.url + " (no answer within 10 s)";
  if (e == httplib::Error::Read) return "reading the response from " + o.url + " failed (closed, or timed out after " +
                                        std::to_string(int(o.timeout_s)) + " s)";
  return "request to " + o.url + " failed: " + httplib::to_string(e);
}

}  // namespace

struct Client::Impl {
  EndpointOptions options;
  Target target;
  std::unique_ptr<httplib::Client> http;
};

Client::Client(const EndpointOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->target = parse_url(options.url);
  impl_->http = connect(options, impl_->target);
}

Client::~Client() = default;

RequestResult Client::send(const Prompt& prompt, std::atomic<uint64_t>* live_tokens) {
  const EndpointOptions& o = impl_->options;
  RequestResult r;
  r.prompt_words = prompt.words;

  BodyOptions body_options{o.chat, o.model, o.stream, o.ignore_eos};
  httplib::Request req;
  req.method = "POST";
  req.path = impl_->target.base_path + (o.chat ? "/v1/chat/completions" : "/v1/completions");
  req.headers = headers(o);
  req.set_header("Content-Type", "application/json");
  if (o.stream) req.set_header("Accept", "text/event-stream");
  req.body = request_body(body_options, prompt.text, prompt.max_tokens);

  const auto sent = std::chrono::steady_clock::now();
  auto since_sent = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count(); };
  int status = 0;
  std::string raw;          // the body of an error response, or of a non-streamed one
  std::string fail;         // the first problem seen in the stream
  std::string head;         // the stream's first bytes, for a message when it is not SSE
  bool done = false, finished = false;
  uint64_t text_chunks = 0;
  std::optional<uint64_t> usage_tokens;

  SseParser parser([&](const std::string& data) {
    if (!fail.empty() || done) return;
    try {
      Chunk c = parse_chunk(data);
      if (c.error) {
        fail = "server error in the stream: " + *c.error;
        return;
      }
      if (c.done) {
        done = true;
        return;
      }
      if (!c.text.empty()) {
        r.token_times_s.push_back(since_sent());
        ++text_chunks;
        if (live_tokens) live_tokens->fetch_add(1, std::memory_order_relaxed);
      }
      finished = finished || c.finished;
      if (c.completion_tokens) usage_tokens = c.completion_tokens;
      if (c.prompt_tokens) r.prompt_tokens = c.prompt_tokens;
    } catch (const std::exception& e) {
      fail = std::string("malformed SSE data: ") + e.what();
    }
  });

  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status == 200 && o.stream) {
      if (head.size() < 200) head.append(data, std::min(n, 200 - head.size()));
      parser.feed(std::string_view(data, n));
      return fail.empty();
    }
    if (raw.size() < (1u << 24)) raw.append(data, n);
    return true;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  bool sent_ok = impl_->http->send(req, res, err);
  r.latency_s = since_sent();
  if (!sent_ok && err != httplib::Error::Canceled) {
    r.error = transport_error(o, err);
    impl_->http = connect(o, impl_->target);  // start over on a fresh connection
    return r;
  }
  if (status == 0) status = res.status;
  if (status != 200) {
    if (raw.empty()) raw = res.body;
    std::string msg = error_message(raw);
    r.error = "HTTP " + std::to_string(status) + (msg.empty() ? std::string(" ") + res.reason : ": " + msg);
    return r;
  }
  if (o.stream) {
    parser.finish();
    if (!fail.empty()) {
      r.error = fail;
      impl_->http = connect(o, impl_->target);
      return r;
    }
    if (!done && !finished) {
      r.error = "the stream ended without data: [DONE]";
      if (text_chunks == 0) r.error += head.empty() ? " (empty body)" : " (it began: " + error_message(head) + ")";
      return r;
    }
    r.output_tokens = usage_tokens.value_or(text_chunks);
  } else {
    try {
      Chunk c = parse_chunk(raw);
      if (c.error) {
        r.error = "server error: " + *c.error;
        return r;
      }
      if (!c.text.empty()) {
        r.token_times_s.push_back(r.latency_s);
        if (live_tokens) live_tokens->fetch_add(c.completion_tokens.value_or(1), std::memory_order_relaxed);
      }
      r.output_tokens = c.completion_tokens.value_or(c.text.empty() ? 0 : 1);
      r.prompt_tokens = c.prompt_tokens;
    } catch (const std::exception& e) {
      r.error = std::string("malformed response: ") + e.what();
      return r;
    }
  }
  r.ok = true;
  return r;
}

ModelsProbe probe_models(const EndpointOptions& o) {
  ModelsProbe p;
  Target t = parse_url(o.url);
  auto http = connect(o, t);
  http->set_read_timeout(std::min<time_t>(30, time_t(o.timeout_s) + 1), 0);
  auto res = http->Get((t.base_path + "/v1/models").c_str(), headers(o));
  if (!res) {
    p.error = transport_error(o, res.error());
    return p;
  }
  p.reachable = true;
  if (res->status != 200) {
    p.error = "GET /v1/models: HTTP " + std::to_string(res->status) + ": " + error_message(res->body);
    return p;
  }
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].is_object() &&
      j["data"][0].contains("id") && j["data"][0]["id"].is_string())
    p.first_model = j["data"][0]["id"].get<std::string>();
  else
    p.error = "GET /v1/models: no data[0].id in the answer";
  return p;
}

}  // namespace tokenhost::loadgen
