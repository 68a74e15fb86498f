#include "loadgen/client.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "http/http_client.hpp"
#include "loadgen/openai.hpp"
#include "loadgen/sse.hpp"

namespace tokenhost::loadgen {

Target parse_url(const std::string& url) {
  Target t;
  t.tls = url.rfind("https://", 0) == 0;
  if (!t.tls && url.rfind("http://", 0) != 0) throw std::invalid_argument("'" + url + "': expected http[s]://HOST[:PORT][/PREFIX]");
  if (t.tls) t.port = 443;
  std::string rest = url.substr(t.tls ? 8 : 7);
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

HttpClient connect(const EndpointOptions& o, const Target& t) {
  HttpClientOptions h;
  h.connect_timeout = std::chrono::seconds(10);
  h.read_timeout = std::chrono::milliseconds(int64_t(1e3 * o.timeout_s));
  h.write_timeout = h.read_timeout;
  if (!o.api_key.empty()) h.headers.emplace_back("Authorization", "Bearer " + o.api_key);
  h.tls.enabled = t.tls;
  h.tls.ca_file = o.ca_file;
  h.tls.verify = !o.insecure;
  return HttpClient(t.host, t.port, std::move(h));
}

// What `tokenhost bench` says when no answer came: the same words for every request to the URL, so that
// the report counts them as one error.
std::string transport_error(const EndpointOptions& o, const HttpClientResult& r) {
  switch (r.error) {
    case HttpClientError::refused:
      return "cannot connect to " + o.url + " (is a server listening there?)";
    case HttpClientError::connect_timeout:
      return "cannot connect to " + o.url + " (no answer within 10 s)";
    case HttpClientError::read_timeout: {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", o.timeout_s);
      return "reading the response from " + o.url + " timed out (nothing for " + seconds + " s)";
    }
    default:
      return r.message;
  }
}

}  // namespace

struct Client::Impl {
  EndpointOptions options;
  Target target;
  HttpClient http;
};

Client::Client(const EndpointOptions& options) {
  Target target = parse_url(options.url);
  HttpClient http = connect(options, target);
  impl_ = std::make_unique<Impl>(Impl{options, std::move(target), std::move(http)});
}

Client::~Client() = default;

RequestResult Client::send(const Prompt& prompt, std::atomic<uint64_t>* live_tokens) {
  const EndpointOptions& o = impl_->options;
  RequestResult r;
  r.prompt_words = prompt.words;

  BodyOptions body_options{o.chat, o.model, o.stream, o.ignore_eos, o.extra_body};
  HttpClientRequest req;
  req.method = "POST";
  req.target = impl_->target.base_path + (o.chat ? "/v1/chat/completions" : "/v1/completions");
  req.content_type = "application/json";
  if (o.stream) req.headers.emplace_back("Accept", "text/event-stream");
  req.body = request_body(body_options, prompt.text, prompt.max_tokens, prompt.history);

  const auto sent = std::chrono::steady_clock::now();
  auto since_sent = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count(); };
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
        r.text += c.text;
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

  auto sink = [&](const HttpClientResult& answer, std::string_view data) {
    if (answer.status == 200 && o.stream) {
      if (head.size() < 200) head.append(data.substr(0, 200 - head.size()));
      parser.feed(data);
      return fail.empty();
    }
    if (raw.size() < (1u << 24)) raw.append(data);
    return true;
  };

  HttpClientResult res = impl_->http.stream(req, sink);
  r.latency_s = since_sent();
  // A problem in the stream cancels the read (the sink returns false): that one is `fail`, said below.
  if (!res.ok() && res.error != HttpClientError::cancelled) {
    r.error = transport_error(o, res);
    return r;
  }
  if (res.status != 200) {
    std::string msg = error_message(raw);
    r.error = "HTTP " + std::to_string(res.status) + (msg.empty() ? " " + res.reason : ": " + msg);
    return r;
  }
  if (o.stream) {
    parser.finish();
    if (!fail.empty()) {
      r.error = fail;
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
        r.text = c.text;
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
  HttpClient http = connect(o, t);
  http.options().read_timeout = std::chrono::milliseconds(int64_t(1e3 * std::min(30.0, o.timeout_s + 1)));
  HttpClientResult res = http.request("GET", t.base_path + "/v1/models");
  if (!res.ok()) {
    p.error = transport_error(o, res);
    return p;
  }
  p.reachable = true;
  if (res.status != 200) {
    p.error = "GET /v1/models: HTTP " + std::to_string(res.status) + ": " + error_message(res.body);
    return p;
  }
  auto j = nlohmann::json::parse(res.body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].is_object() &&
      j["data"][0].contains("id") && j["data"][0]["id"].is_string())
    p.first_model = j["data"][0]["id"].get<std::string>();
  else
    p.error = "GET /v1/models: no data[0].id in the answer";
  return p;
}

HttpClient connect_to(const EndpointOptions& options) { return connect(options, parse_url(options.url)); }

}  // namespace tokenhost::loadgen
