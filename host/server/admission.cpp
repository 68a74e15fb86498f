#include "server/admission.hpp"

#include <algorithm>
#include <deque>

#include "metrics/metrics.hpp"

namespace tokenhost {

namespace {
constexpr auto kWindow = std::chrono::seconds(60);  // client_tokens_per_minute's window
}

// What is admitted now, shared by the Admission and its tickets (which may outlive it).
class AdmissionState {
 public:
  struct Charge {
    uint64_t id;
    Admission::Clock::time_point at;
    uint64_t tokens;
  };
  struct Client {
    uint32_t sequences = 0;
    std::deque<Charge> charges;  // oldest first, within the window
    uint64_t charged() const {
      uint64_t n = 0;
      for (const auto& c : charges) n += c.tokens;
      return n;
    }
  };

  void expire(Client& c, Admission::Clock::time_point now) {
    while (!c.charges.empty() && now - c.charges.front().at >= kWindow) c.charges.pop_front();
  }
  void forget_if_idle(const std::string& name) {
    auto it = clients.find(name);
    if (it != clients.end() && it->second.sequences == 0 && it->second.charges.empty()) clients.erase(it);
  }

  std::mutex mutex;
  std::map<std::string, Client> clients;
  std::map<std::string, uint64_t> kv_demand;  // by model: prompt + max_tokens of admitted sequences
  uint64_t next_charge = 0;
};

AdmissionTicket::AdmissionTicket(std::shared_ptr<AdmissionState> state, AdmissionAsk ask, uint64_t charge_id)
    : state_(std::move(state)), ask_(std::move(ask)), charge_id_(charge_id) {}

AdmissionTicket::~AdmissionTicket() {
  std::lock_guard lock(state_->mutex);
  if (auto d = state_->kv_demand.find(ask_.model); d != state_->kv_demand.end()) {
    d->second -= std::min(d->second, ask_.kv_demand());
    if (d->second == 0) state_->kv_demand.erase(d);
  }
  auto it = state_->clients.find(ask_.client);
  if (it == state_->clients.end()) return;
  it->second.sequences -= std::min(it->second.sequences, ask_.sequences);
  if (used_) {
    for (auto& c : it->second.charges)
      if (c.id == charge_id_) c.tokens = std::min(c.tokens, *used_);
  }
  state_->forget_if_idle(ask_.client);
}

Admission::Admission(GatewayLimits limits, metrics::Family* refusals)
    : limits_(limits), refusals_(refusals), state_(std::make_shared<AdmissionState>()) {}

std::variant<std::shared_ptr<AdmissionTicket>, AdmissionRefusal> Admission::admit(const AdmissionAsk& ask,
                                                                                   Clock::time_point now) {
  auto refuse = [&](AdmissionRefusal r) -> std::variant<std::shared_ptr<AdmissionTicket>, AdmissionRefusal> {
    if (refusals_) refusals_->add({r.code}, 1);
    return r;
  };
  std::lock_guard lock(state_->mutex);
  AdmissionState::Client& client = state_->clients[ask.client];
  state_->expire(client, now);
  const std::string who = ask.client.rfind("key:", 0) == 0 ? "this API key" : "client " + ask.client.substr(ask.client.find(':') + 1);

  if (limits_.client_max_sequences > 0 && client.sequences + ask.sequences > limits_.client_max_sequences) {
    const uint32_t held = client.sequences;
    state_->forget_if_idle(ask.client);
    return refuse({429, 1, "client_sequences",
                   who + " runs " + std::to_string(held) + " sequences and this request asks for " +
                       std::to_string(ask.sequences) + " more; the limit per client is " +
                       std::to_string(limits_.client_max_sequences) + " at once"});
  }
  if (limits_.client_tokens_per_minute > 0) {
    const uint64_t limit = limits_.client_tokens_per_minute, charged = client.charged();
    if (ask.tokens > limit) {
      state_->forget_if_idle(ask.client);
      return refuse({429, 60, "client_tokens",
                     "this request asks for " + std::to_string(ask.tokens) +
                         " tokens (prompt + max_tokens of each sequence), more than a client may use in a minute (" +
                         std::to_string(limit) + "): lower max_tokens or n"});
    }
    if (charged + ask.tokens > limit) {
      // Retry once enough of the oldest charges leave the window.
      uint64_t left = charged;
      auto when = now;
      for (const auto& c : client.charges) {
        left -= c.tokens;
        when = c.at + kWindow;
        if (left + ask.tokens <= limit) break;
      }
      const int retry = int(std::max<int64_t>(1, std::chrono::ceil<std::chrono::seconds>(when - now).count()));
      return refuse({429, retry, "client_tokens",
                     who + " used " + std::to_string(charged) + " of its " + std::to_string(limit) +
                         " tokens per minute and this request asks for " + std::to_string(ask.tokens) +
                         " (prompt + max_tokens); retry in " + std::to_string(retry) + " s"});
    }
  }
  const uint64_t demand = state_->kv_demand.count(ask.model) ? state_->kv_demand.at(ask.model) : 0;
  if (limits_.kv_admission_factor > 0 && ask.pool_tokens > 0 && demand > 0) {
    const double cap = double(ask.pool_tokens) * limits_.kv_admission_factor;
    if (double(demand + ask.kv_demand()) > cap) {
      state_->forget_if_idle(ask.client);
      return refuse({503, 1, "kv_demand",
                     "the server is at capacity: the admitted requests of model " + ask.model + " may hold " +
                         std::to_string(demand) + " KV positions and this one asks for " + std::to_string(ask.kv_demand()) +
                         ", above the " + std::to_string(uint64_t(cap)) + " admitted (KV pool of " +
                         std::to_string(ask.pool_tokens) + " positions x kv_admission_factor)"});
    }
  }
  client.sequences += ask.sequences;
  const uint64_t id = ++state_->next_charge;
  if (limits_.client_tokens_per_minute > 0) client.charges.push_back({id, now, ask.tokens});
  state_->kv_demand[ask.model] = demand + ask.kv_demand();
  return std::make_shared<AdmissionTicket>(state_, ask, id);
}

nlohmann::json Admission::status(Clock::time_point now) const {
  std::lock_guard lock(state_->mutex);
  nlohmann::json clients = nlohmann::json::object(), demand = nlohmann::json::object();
  for (auto& [name, c] : state_->clients) {
    state_->expire(c, now);
    clients[name] = {{"sequences", c.sequences}, {"tokens_last_minute", c.charged()}};
  }
  for (const auto& [model, d] : state_->kv_demand) demand[model] = d;
  return {{"limits",
           {{"default_max_tokens", limits_.default_max_tokens},
            {"client_max_sequences", limits_.client_max_sequences},
            {"client_tokens_per_minute", limits_.client_tokens_per_minute},
            {"kv_admission_factor", limits_.kv_admission_factor}}},
          {"clients", clients},
          {"kv_demand", demand}};
}

}  // namespace tokenhost
