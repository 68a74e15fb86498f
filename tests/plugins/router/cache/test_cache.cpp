// The exact-match response cache (sdk::ResponseCache, served by router.cache and router.cascade): a hit
// gives the stored tokens as they were; any change of prompt, parameters or namespace misses; a request
// that is not deterministic is never answered; answers expire on the TTL; entries and bytes stay within
// bounds, the least recently used going first.
#include <catch2/catch.hpp>

#include <random>

#include <tokenhost/plugin_route.hpp>

#include "../router_under_test.hpp"

namespace router_cache_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Cache = sdk::ResponseCache;

namespace {

struct Ask {
  std::vector<int32_t> prompt;
  uint64_t ns = 1, params = 1;
  int32_t deterministic = 1;
  uint32_t max_tokens = 64;
  th_route_request request() const {
    th_route_request r{};
    r.struct_size = sizeof r;
    r.tokens = prompt.data();
    r.n_tokens = uint32_t(prompt.size());
    r.max_tokens = max_tokens;
    r.cache_namespace = ns;
    r.params_key = params;
    r.deterministic = deterministic;
    return r;
  }
  th_route_feedback told(const std::vector<int32_t>& answer, int32_t stop = TH_STOP_EOS) const {
    th_route_feedback f{};
    f.struct_size = sizeof f;
    f.ok = 1;
    f.prompt_tokens = prompt.data();
    f.n_prompt_tokens = uint32_t(prompt.size());
    f.output_tokens = answer.data();
    f.tokens_out = uint32_t(answer.size());
    f.stop = stop;
    f.cache_namespace = ns;
    f.params_key = params;
    f.deterministic = deterministic;
    return f;
  }
};

std::optional<std::vector<int32_t>> lookup(Cache& c, const Ask& a, Cache::Clock::time_point now = Cache::Clock::now()) {
  th_route_request r = a.request();
  th_route_decision d{};
  d.struct_size = sizeof d;
  if (!c.answer(r, d, now)) return std::nullopt;
  REQUIRE(d.action == TH_ROUTE_CACHED);
  return std::vector<int32_t>(d.cached_tokens, d.cached_tokens + d.n_cached_tokens);
}

std::vector<int32_t> random_tokens(std::mt19937_64& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % 32000);
  return t;
}

}  // namespace

TEST_CASE("response cache: a hit is the stored answer, a change of prompt, parameters or namespace misses", "[plugins][router][cache]") {
  auto rng = testing::fresh_rng("response cache");
  Cache cache(Cache::Limits{});
  for (int i = 0; i < 50; ++i) {
    Ask a{random_tokens(rng, 1 + rng() % 40), rng(), rng()};
    const auto answer = random_tokens(rng, rng() % 30);
    CHECK_FALSE(lookup(cache, a));
    cache.remember(a.told(answer));
    CHECK(lookup(cache, a) == answer);
    Ask other = a;
    other.prompt.push_back(5);
    CHECK_FALSE(lookup(cache, other));
    other = a;
    other.prompt[rng() % other.prompt.size()] ^= 1;
    CHECK_FALSE(lookup(cache, other));
    other = a;
    other.params ^= 1;
    CHECK_FALSE(lookup(cache, other));
    other = a;
    other.ns ^= 1;  // another API key or cache_salt
    CHECK_FALSE(lookup(cache, other));
    other = a;
    other.deterministic = 0;
    CHECK_FALSE(lookup(cache, other));
  }
  // What is not kept: a non-deterministic answer, a cancelled or failed one, one a cache gave.
  Ask a{{1, 2, 3}};
  auto f = a.told({4});
  f.deterministic = 0;
  cache.remember(f);
  CHECK_FALSE(lookup(cache, a));
  f = a.told({4}, TH_STOP_CANCELLED);
  cache.remember(f);
  CHECK_FALSE(lookup(cache, a));
  f = a.told({4});
  f.ok = 0;
  cache.remember(f);
  CHECK_FALSE(lookup(cache, a));
  f = a.told({4});
  f.cached = 1;
  cache.remember(f);
  CHECK_FALSE(lookup(cache, a));
}

TEST_CASE("response cache: answers expire on the TTL and the cache stays within its bounds", "[plugins][router][cache]") {
  const auto t0 = Cache::Clock::now();
  Cache ttl(Cache::Limits{10.0, 100, 1 << 20});
  Ask a{{7, 8, 9}};
  ttl.remember(a.told({1, 2}), t0);
  CHECK(lookup(ttl, a, t0 + std::chrono::seconds(9)));
  CHECK_FALSE(lookup(ttl, a, t0 + std::chrono::seconds(11)));
  CHECK(ttl.entries() == 0);  // an expired answer is dropped when found
  // Entries: the least recently used goes first.
  Cache few(Cache::Limits{300, 3, 1 << 20});
  std::vector<Ask> asks;
  for (int32_t i = 0; i < 4; ++i) asks.push_back(Ask{{i, i + 1}});
  for (int i = 0; i < 3; ++i) few.remember(asks[size_t(i)].told({i}));
  CHECK(lookup(few, asks[0]));  // 0 is now the most recently used
  few.remember(asks[3].told({3}));
  CHECK(few.entries() == 3);
  CHECK_FALSE(lookup(few, asks[1]));
  CHECK(lookup(few, asks[0]));
  CHECK(lookup(few, asks[3]));
  // Bytes: 4 per token and 64 per entry, never above max_bytes.
  auto rng = testing::fresh_rng("response cache");
  Cache small(Cache::Limits{300, 1000, 4096});
  for (int i = 0; i < 200; ++i) {
    Ask x{random_tokens(rng, 10 + rng() % 100), uint64_t(i)};
    small.remember(x.told(random_tokens(rng, rng() % 200)));
    CHECK(small.bytes() <= 4096);
  }
  CHECK(small.entries() > 2);
  CHECK(small.entries() < 40);
  Cache tiny(Cache::Limits{300, 1000, 100});  // an answer larger than the whole cache is not kept
  tiny.remember(Ask{{1}}.told(std::vector<int32_t>(100, 1)));
  CHECK(tiny.entries() == 0);
}

TEST_CASE("router.cache: repeats come from the cache, the rest go to the least loaded candidate", "[plugins][router][cache]") {
  RouterUnderTest r("router.cache", 3, toml::table{{"cache_ttl_s", 60.0}});
  r.candidates[0].running = 4;
  r.candidates[1].running = 1;
  r.candidates[2].running = 9;
  CHECK(r.next() == 1);
  // The plugin keeps what feedback() tells it and answers the same request from it.
  Ask a{{3, 1, 4, 1, 5}, 11, 22};
  const std::vector<int32_t> answer = {9, 2, 6};
  auto f = a.told(answer, TH_STOP_LENGTH);
  r.inst->vtable<th_router_vtable>().feedback(r.inst->handle(), &f);
  th_route_request req = a.request();
  req.candidates = r.candidates.data();
  req.n_candidates = 3;
  req.model = "m";
  req.prompt = "";
  req.session_key = "";
  std::vector<uint32_t> cascade(3);
  th_route_decision d{};
  d.struct_size = sizeof d;
  d.cascade = cascade.data();
  th_error err;
  REQUIRE(r.inst->vtable<th_router_vtable>().route(r.inst->handle(), &req, &d, &err) == TH_OK);
  REQUIRE(d.action == TH_ROUTE_CACHED);
  CHECK(std::vector<int32_t>(d.cached_tokens, d.cached_tokens + d.n_cached_tokens) == answer);
  CHECK(d.cached_stop == TH_STOP_LENGTH);
}

TEST_CASE("least_loaded: the fewest running first, the nearest node among equals, and a 1.7 host's request without nodes", "[plugins][router]") {
  std::vector<std::string> names = {"local", "near", "far", "unmeasured"};
  std::vector<th_route_candidate> cands(4);
  for (size_t i = 0; i < cands.size(); ++i) {
    cands[i].engine_id = names[i].c_str();
    cands[i].model = "m";
    cands[i].healthy = 1;
  }
  const char* nodes[] = {"", "worker-1", "worker-2", "worker-3"};
  const double rtt[] = {0.0, 0.0004, 0.030, -1.0};
  th_route_request r{};
  r.struct_size = sizeof r;
  r.candidates = cands.data();
  r.n_candidates = 4;
  r.candidate_nodes = nodes;
  r.candidate_rtt_s = rtt;
  CHECK(sdk::candidate_node(r, 2) == std::string("worker-2"));
  CHECK(sdk::candidate_rtt_s(r, 3) == -1.0);
  // All idle: this process's engine or worker-1's (0.4 ms is 0 whole milliseconds: as near), in
  // rotation; never the far or the unmeasured one.
  CHECK(sdk::least_loaded(r, 0) == 0);
  CHECK(sdk::least_loaded(r, 1) == 1);
  CHECK(sdk::least_loaded(r, 2) == 0);
  CHECK(sdk::least_loaded(r, 3) == 0);
  cands[0].running = 1;
  // The idle ones: worker-1 nearest.
  CHECK(sdk::least_loaded(r, 0) == 1);
  cands[1].running = 1;
  CHECK(sdk::least_loaded(r, 0) == 2);  // far, but idle: load comes first
  cands[2].running = 1;
  CHECK(sdk::least_loaded(r, 0) == 3);
  cands[3].running = 1;
  CHECK(sdk::least_loaded(r, 1) == 1);  // all equal: near ones in rotation, never the unmeasured or far one first
  CHECK(sdk::least_loaded(r, 2) == 0);
  // From a host before 1.8 the request ends at payer: no nodes, every candidate this process's.
  r.struct_size = uint32_t(TH_SIZE_THROUGH(th_route_request, payer));
  r.candidate_nodes = nullptr;
  r.candidate_rtt_s = nullptr;
  CHECK(sdk::candidate_node(r, 1) == std::string(""));
  CHECK(sdk::least_loaded(r, 2) == 2);  // plain rotation among equals
}

}  // namespace router_cache_tests
