// The gateway's admission (server/admission.hpp) on a clock of its own: per-client sequences, tokens
// per minute with the Retry-After that frees them, KV demand against the pool, and what tickets give
// back when requests end.
#include <catch2/catch.hpp>

#include <memory>
#include <variant>

#include "metrics/metrics.hpp"
#include "server/admission.hpp"

namespace server_admission_tests {

using namespace tokenhost;
using Clock = Admission::Clock;
using namespace std::chrono_literals;

namespace {

using Outcome = std::variant<std::shared_ptr<AdmissionTicket>, AdmissionRefusal>;

std::shared_ptr<AdmissionTicket> ticket(Outcome o) {
  if (auto* r = std::get_if<AdmissionRefusal>(&o)) FAIL("refused: " << r->message);
  return std::get<std::shared_ptr<AdmissionTicket>>(std::move(o));
}

AdmissionRefusal refusal(const Outcome& o) {
  REQUIRE(std::holds_alternative<AdmissionRefusal>(o));
  return std::get<AdmissionRefusal>(o);
}

AdmissionAsk ask(const std::string& client, uint32_t sequences, uint64_t tokens, uint64_t pool = 0) {
  return AdmissionAsk{client, "m", sequences, tokens, pool};
}

}  // namespace

TEST_CASE("admission: no limits admits everything", "[admission]") {
  Admission a(GatewayLimits{}, nullptr);
  std::vector<std::shared_ptr<AdmissionTicket>> held;
  for (int i = 0; i < 100; ++i) held.push_back(ticket(a.admit(ask("addr:1", 16, 100000, 10))));
  CHECK(a.status()["clients"]["addr:1"]["sequences"] == 1600);
}

TEST_CASE("admission: a client's concurrent sequences are capped, others are not held back, and ending frees them", "[admission]") {
  GatewayLimits limits;
  limits.client_max_sequences = 20;
  metrics::Registry reg;
  auto& refusals = reg.family(metrics::Type::counter, "refusals", "", {"reason"});
  Admission a(limits, &refusals);
  auto t1 = ticket(a.admit(ask("key:a", 16, 10)));
  const AdmissionRefusal r = refusal(a.admit(ask("key:a", 8, 10)));
  CHECK(r.http_status == 429);
  CHECK(r.code == "client_sequences");
  CHECK(r.retry_after_s >= 1);
  CHECK_THAT(r.message, Catch::Contains("runs 16 sequences") && Catch::Contains("limit per client is 20"));
  auto t2 = ticket(a.admit(ask("key:a", 4, 10)));  // exactly at the limit
  auto other = ticket(a.admit(ask("key:b", 16, 10)));
  CHECK_THAT(reg.prometheus_text(), Catch::Contains("refusals{reason=\"client_sequences\"} 1"));
  t1.reset();
  auto t3 = ticket(a.admit(ask("key:a", 16, 10)));
  CHECK(a.status()["clients"]["key:a"]["sequences"] == 20);
}

TEST_CASE("admission: tokens per minute are charged when admitted, corrected when done, and free up as they age", "[admission]") {
  GatewayLimits limits;
  limits.client_tokens_per_minute = 1000;
  Admission a(limits, nullptr);
  const auto t0 = Clock::now();
  {
    auto t = ticket(a.admit(ask("addr:x", 1, 600), t0));
    t->set_used_tokens(100);  // it stopped early: charged 100, not 600
  }
  auto t2 = ticket(a.admit(ask("addr:x", 1, 500), t0 + 10s));  // 100 + 500
  const AdmissionRefusal r = refusal(a.admit(ask("addr:x", 1, 600), t0 + 20s));  // 600 + 600 > 1000
  CHECK(r.http_status == 429);
  CHECK(r.code == "client_tokens");
  // The first charge (100) leaving at t0 + 60 s is not enough; the second (500) leaves at t0 + 70 s.
  CHECK(r.retry_after_s == 50);
  CHECK(refusal(a.admit(ask("addr:x", 1, 600), t0 + 61s)).retry_after_s == 9);
  auto t3 = ticket(a.admit(ask("addr:x", 1, 600), t0 + 70s));
  // Another client is not charged for x's tokens.
  auto t4 = ticket(a.admit(ask("addr:y", 1, 1000), t0 + 20s));
  // A request larger than the limit alone can never pass: said so, with the minute to wait.
  const AdmissionRefusal big = refusal(a.admit(ask("addr:z", 1, 1001), t0));
  CHECK_THAT(big.message, Catch::Contains("more than a client may use in a minute"));
}

TEST_CASE("admission: KV demand is held within the pool times the factor, per model", "[admission]") {
  GatewayLimits limits;
  limits.kv_admission_factor = 2.0;
  Admission a(limits, nullptr);
  // A pool of 1000 positions admits 2000 positions of demand.
  auto t1 = ticket(a.admit(ask("addr:1", 4, 1500, 1000)));
  const AdmissionRefusal r = refusal(a.admit(ask("addr:2", 1, 600, 1000)));
  CHECK(r.http_status == 503);
  CHECK(r.code == "kv_demand");
  CHECK_THAT(r.message, Catch::Contains("1500") && Catch::Contains("600") && Catch::Contains("2000"));
  auto t2 = ticket(a.admit(ask("addr:2", 1, 500, 1000)));
  // Another model's pool is its own.
  auto other = ticket(a.admit(AdmissionAsk{"addr:2", "n", 1, 1500, 1000}));
  t1.reset();
  t2.reset();
  // Nothing admitted: even a request above the cap passes (it is never refused forever).
  auto big = ticket(a.admit(ask("addr:3", 1, 5000, 1000)));
  CHECK(a.status()["kv_demand"]["m"] == 5000);
  // An unknown pool (0) is not checked.
  auto unknown = ticket(a.admit(ask("addr:3", 1, 5000, 0)));
}

TEST_CASE("admission: tickets outlive the admission, and idle clients are forgotten", "[admission]") {
  GatewayLimits limits;
  limits.client_max_sequences = 4;
  std::shared_ptr<AdmissionTicket> t;
  {
    Admission a(limits, nullptr);
    t = ticket(a.admit(ask("addr:1", 2, 10)));
    auto u = ticket(a.admit(ask("addr:2", 1, 10)));
    u.reset();
    CHECK_FALSE(a.status()["clients"].contains("addr:2"));
    CHECK(a.status()["clients"]["addr:1"]["sequences"] == 2);
  }
  t.reset();  // its state is still there: no use after free
}

TEST_CASE("admission: a sliding window's requests count the positions they hold, not their tokens", "[admission][window]") {
  GatewayLimits limits;
  limits.kv_admission_factor = 1.0;
  limits.client_tokens_per_minute = 100000;
  Admission a(limits, nullptr);
  // Two long conversations under a window of 256 positions each: 512 of a pool of 1000.
  AdmissionAsk windowed = ask("addr:1", 1, 6000, 1000);
  windowed.kv_tokens = 256;
  auto t1 = ticket(a.admit(windowed));
  windowed.client = "addr:2";
  auto t2 = ticket(a.admit(windowed));
  CHECK(a.status()["kv_demand"]["m"] == 512);
  // Without a window the same request is refused: its tokens are its positions.
  CHECK(refusal(a.admit(ask("addr:3", 1, 6000, 1000))).code == "kv_demand");
  // Rate limits still charge every token.
  windowed.client = "addr:1";
  auto t3 = ticket(a.admit(windowed));
  AdmissionAsk more = ask("addr:1", 1, 90000, 1000);
  more.kv_tokens = 1;
  CHECK(refusal(a.admit(more)).code == "client_tokens");
  // Ending gives back what was counted.
  t1.reset();
  t2.reset();
  t3.reset();
  CHECK(a.status()["kv_demand"].empty());
}

}  // namespace server_admission_tests
