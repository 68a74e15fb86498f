#include "server/gateway.hpp"

#include <set>

#include <algorithm>
#include <thread>

#include <spdlog/spdlog.h>

#include "model/tokenizer.hpp"

namespace tokenhost {

std::vector<int32_t> ServedModel::encode(const std::string& text, bool add_bos, bool parse_special) const {
  if (tokenizer) return tokenizer->encode(text, add_bos, parse_special);
  std::vector<int32_t> bytes;  // synthetic models: one token per byte
  for (unsigned char c : text) bytes.push_back(c);
  return bytes;
}

std::string ServedModel::piece(int32_t token) const {
  if (tokenizer) return tokenizer->token_text(token);
  return std::string(1, token < 256 ? char(token) : '?');
}

Gateway::Gateway(GatewayInit init)
    : system_(*init.system),
      router_(std::move(init.router)),
      engines_(std::move(init.engines)),
      models_(std::move(init.models)),
      experiments_(std::move(init.experiments)),
      limits_(init.limits),
      recorder_(std::move(init.recorder)),
      embed_(std::move(init.embed)) {
  refusals_ = &init.metrics->family(metrics::Type::counter, "tokenhost_gateway_refusals_total",
                                    "Requests the gateway refused before they started, by reason (api_key, "
                                    "client_sequences, client_tokens, kv_demand)",
                                    {"reason"});
  admission_ = std::make_unique<Admission>(limits_, refusals_);
}

const ServedModel* Gateway::find_model(const std::string& name) const {
  if (name.empty()) {
    const std::string first = engines_->first_model();
    return first.empty() ? nullptr : find_model(first);
  }
  for (const auto& m : models_)
    if (m.name == name || std::find(m.aliases.begin(), m.aliases.end(), name) != m.aliases.end()) return &m;
  return nullptr;
}

Gateway::Health Gateway::health() const {
  Health h;
  std::set<std::string> served;
  for (const auto& e : engines_->live()) {
    if (e->serving()) {
      served.insert(e->model());
    } else if (!e->stopped()) {
      h.down_engines.push_back({e->name(), e->hung(), "hung"});
    } else {
      const std::string state = e->recovery_state();
      h.down_engines.push_back({e->name(), e->stop_reason(), state.empty() ? "down" : state});
    }
  }
  for (const auto& m : models_) {
    // A group is served while any of its members is.
    const bool serves = m.members.empty() ? served.count(m.name) > 0
                                          : std::any_of(m.members.begin(), m.members.end(), [&](const std::string& x) { return served.count(x) > 0; });
    if (!serves) h.models_without_engine.push_back(m.name);
  }
  if (!accepting() || !h.models_without_engine.empty() || served.empty()) h.state = Health::State::failing;
  else h.state = h.down_engines.empty() ? Health::State::ok : Health::State::degraded;
  return h;
}

const ServedModel& Gateway::default_model() const {
  static const ServedModel bytes;  // no engine left (stopped): one token per byte
  const ServedModel* m = find_model("");
  return m != nullptr ? *m : bytes;
}

std::vector<int32_t> Gateway::encode(const std::string& text) const { return default_model().encode(text, true, false); }

std::string Gateway::decode(const std::vector<int32_t>& tokens) const {
  std::string text;
  for (int32_t id : tokens) text += default_model().piece(id);
  return text;
}

std::variant<std::shared_ptr<AdmissionTicket>, AdmissionRefusal> Gateway::admit(AdmissionAsk ask) {
  const ServedModel* m = find_model(ask.model);
  if (m != nullptr && !m->members.empty()) {  // a group: its members' engines together
    ask.pool_tokens = 0;
    for (const auto& member : m->members) ask.pool_tokens += engines_->kv_positions_of(member);
  } else {
    ask.pool_tokens = engines_->kv_positions_of(ask.model);
  }
  return admission_->admit(ask);
}

std::string Gateway::check_arm_choice(const std::string& model, const std::string& arm) const {
  return experiments_->check_choice(model, arm);
}

std::shared_ptr<TokenStream> Gateway::start(GenerateRequest request) {
  auto stream = request.stream ? request.stream : std::make_shared<TokenStream>();
  request.stream = stream;
  if (!accepting_) {
    stream->finish(GenerateResult::failed("", "the server is shutting down"));
    return stream;
  }
  // A request that names no model is for the default one, whose experiment then applies.
  if (request.model.empty())
    if (const ServedModel* m = find_model(""); m != nullptr && !experiments_->running_on_model(m->name).empty())
      request.model = m->name;
  ++in_flight_;
  {
    std::lock_guard lock(open_mutex_);
    open_[request.id] = stream;
  }
  // A short-lived actor asks the router and finishes the stream with the answer; the engine pushes
  // tokens to the stream meanwhile. The request and the stream are spawn arguments, not captures: an
  // actor spawned without arguments makes CAF 0.17 bind a reference to a null tuple (undefined
  // behaviour that UBSan stops the server for).
  auto ask = [this, router = router_](caf::event_based_actor* self, GenerateRequest request, std::shared_ptr<TokenStream> stream) {
    const uint64_t id = request.id;
    auto done = [this, stream, id](const GenerateResult& r) {
      stream->finish(r);
      {
        std::lock_guard lock(open_mutex_);
        open_.erase(id);
      }
      --in_flight_;
    };
    self->request(router, caf::infinite, generate_atom::value, std::move(request))
        .then([done](GenerateResult& r) { done(r); },
              [done, self](caf::error& e) { done(GenerateResult::failed("", "request failed: " + self->system().render(e))); });
  };
  system_.spawn(ask, std::move(request), stream);
  return stream;
}

void Gateway::cancel(uint64_t id) {
  if (stopped_) return;
  caf::anon_send(router_, cancel_atom::value, id);
}

GenerateResult Gateway::generate(GenerateRequest request, std::chrono::milliseconds timeout) {
  const uint64_t id = request.id;
  auto stream = start(std::move(request));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t seen = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto u = stream->wait(seen, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
    seen += u.tokens.size();
    if (u.result) return *u.result;
  }
  stream->cancel();
  cancel(id);
  return GenerateResult::failed("", "the request timed out after " + std::to_string(timeout.count()) + " ms");
}

void Gateway::fail_open_streams(const std::string& why) {
  std::vector<std::shared_ptr<TokenStream>> open;
  {
    std::lock_guard lock(open_mutex_);
    for (auto& [id, weak] : open_)
      if (auto s = weak.lock()) open.push_back(std::move(s));
  }
  for (auto& s : open) s->finish(GenerateResult::failed("", why));
}

size_t Gateway::drain(std::chrono::milliseconds grace) {
  accepting_ = false;
  spdlog::info("shutting down: {} requests in flight", in_flight_.load());
  caf::anon_send(router_, drain_atom::value);
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (in_flight_ > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const size_t left = in_flight_.load();
  if (left > 0) spdlog::warn("{} requests still running after the grace period; stopping them", left);
  stopped_ = true;
  // Once the actors stop nothing will finish these: their readers get the end now.
  fail_open_streams("the server stopped before the request finished (shutting down)");
  return left;
}

}  // namespace tokenhost
