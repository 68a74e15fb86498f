// Admission at the gateway: what one client may hold and use, and how much KV demand a model's engines
// are given, decided before a request starts ([limits] of the manifest: GatewayLimits).
//
// A request asks for its sequences (prompts x n) and its tokens (prompt + max_tokens of each). It is
// admitted, and holds a ticket until its last sequence ends, or refused with the HTTP answer to give:
//  - 429 + Retry-After: its client already runs client_max_sequences sequences, or was charged
//    client_tokens_per_minute tokens in the last 60 s (Retry-After: when enough of those charges expire);
//  - 503 + Retry-After: admitting it would raise the KV demand of its model's admitted sequences above
//    the model's KV pool times kv_admission_factor (a request is always admitted when none of its model
//    is: a large request is not refused forever).
// A client is its API key when the gateway has keys, else its address (GenerateRequest::client).
// Thread-safe: the gateway's I/O threads admit, and tickets end on any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "manifest/deployment.hpp"

namespace tokenhost {

namespace metrics {
class Family;
}

struct AdmissionAsk {
  std::string client;
  std::string model;
  uint32_t sequences = 0;
  uint64_t tokens = 0;        // prompt + max_tokens, summed over the sequences
  uint64_t pool_tokens = 0;   // KV positions of the model's engines; 0 = unknown (no KV check)
  // KV positions the sequences may hold at once, when fewer than `tokens` (a sliding window's cap per
  // sequence); 0: tokens.
  uint64_t kv_tokens = 0;
  uint64_t kv_demand() const { return kv_tokens > 0 ? kv_tokens : tokens; }
};

struct AdmissionRefusal {
  int http_status = 429;
  int retry_after_s = 1;
  std::string code;     // "client_sequences", "client_tokens", "kv_demand": the metrics' reason label
  std::string message;  // for the client: what was asked, what the limit is
};

class AdmissionState;

// Held while an admitted request runs; the destructor gives its sequences and KV demand back.
class AdmissionTicket {
 public:
  AdmissionTicket(std::shared_ptr<AdmissionState> state, AdmissionAsk ask, uint64_t charge_id);
  ~AdmissionTicket();
  AdmissionTicket(const AdmissionTicket&) = delete;
  AdmissionTicket& operator=(const AdmissionTicket&) = delete;
  // The tokens the request really used (prompt + generated): its per-minute charge becomes this.
  void set_used_tokens(uint64_t tokens) { used_ = tokens; }

 private:
  std::shared_ptr<AdmissionState> state_;
  AdmissionAsk ask_;
  uint64_t charge_id_;
  std::optional<uint64_t> used_;
};

class Admission {
 public:
  using Clock = std::chrono::steady_clock;
  // refusals: a counter family labelled by reason (may be NULL).
  Admission(GatewayLimits limits, metrics::Family* refusals);

  std::variant<std::shared_ptr<AdmissionTicket>, AdmissionRefusal> admit(const AdmissionAsk& ask,
                                                                          Clock::time_point now = Clock::now());
  // Clients with sequences or recent charges, and each model's KV demand (admin status).
  nlohmann::json status(Clock::time_point now = Clock::now()) const;
  const GatewayLimits& limits() const { return limits_; }

 private:
  GatewayLimits limits_;
  metrics::Family* refusals_;
  std::shared_ptr<AdmissionState> state_;
};

}  // namespace tokenhost
