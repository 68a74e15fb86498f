// router.cost_quality: the cheapest model whose declared quality meets the request's need (by prompt
// length and class), weighed by measured latency, and the cheapest for a payer past its budget.
#include <catch2/catch.hpp>

#include "../router_under_test.hpp"

namespace router_cost_quality_tests {

using namespace tokenhost;
using namespace tokenhost::testing;

namespace {

struct Group : RouterUnderTest {
  explicit Group(const toml::table& config) : RouterUnderTest("router.cost_quality", 3, config) {
    const char* models[] = {"small", "medium", "large"};
    const double cost[] = {0.2, 0.5, 1.0}, quality[] = {0.6, 0.8, 1.0};
    for (size_t i = 0; i < 3; ++i) {
      candidates[i].model = models[i];
      candidates[i].cost_per_mtok = cost[i];
      candidates[i].quality = quality[i];
    }
  }
  // The model chosen for a request of n prompt tokens, class and payer.
  std::string pick(uint32_t n, const std::string& klass = "", const std::string& payer = "", uint64_t id = 1) {
    std::vector<int32_t> tokens(n, 1);
    th_route_request req{};
    req.struct_size = sizeof req;
    req.request_id = id;
    req.model = "group";
    req.prompt = "";
    req.session_key = "";
    req.tokens = tokens.data();
    req.n_tokens = n;
    req.candidates = candidates.data();
    req.n_candidates = 3;
    req.request_class = klass.c_str();
    req.payer = payer.c_str();
    th_route_decision d{};
    d.struct_size = sizeof d;
    d.cascade = cascade.data();
    th_error err;
    REQUIRE(inst->vtable<th_router_vtable>().route(inst->handle(), &req, &d, &err) == TH_OK);
    REQUIRE(d.action == TH_ROUTE_TARGET);
    REQUIRE(d.target < 3);
    return candidates[d.target].model;
  }
  void told(uint64_t id, const char* engine, double total_s, uint32_t tokens, double cost) {
    th_route_feedback f{};
    f.struct_size = sizeof f;
    f.request_id = id;
    f.engine_id = engine;
    f.ok = 1;
    f.total_s = total_s;
    f.tokens_out = tokens;
    f.cost = cost;
    inst->vtable<th_router_vtable>().feedback(inst->handle(), &f);
  }
};

}  // namespace

TEST_CASE("router.cost_quality: the cheapest model whose quality meets the request's difficulty", "[plugins][router]") {
  Group g(toml::table{{"min_quality", 0.5}, {"max_quality", 1.0}, {"long_prompt_tokens", 100}, {"hard_classes", "premium, code"},
                      {"easy_classes", "batch"}});
  CHECK(g.pick(1) == "small");     // needs 0.505
  CHECK(g.pick(20) == "small");    // needs 0.6
  CHECK(g.pick(21) == "medium");   // needs 0.605
  CHECK(g.pick(60) == "medium");   // needs 0.8
  CHECK(g.pick(61) == "large");    // needs 0.805
  CHECK(g.pick(400) == "large");   // difficulty is at most 1
  CHECK(g.pick(2, "code") == "large");
  CHECK(g.pick(400, "batch") == "small");
  g.candidates[2].healthy = 0;  // none good enough is healthy: the best quality there is
  CHECK(g.pick(400) == "medium");
}

TEST_CASE("router.cost_quality: measured latency weighs the cost, and a payer past its budget gets the cheapest", "[plugins][router]") {
  Group g(toml::table{{"min_quality", 0.8}, {"max_quality", 0.8}, {"latency_weight", 10.0}, {"budgets", "key-00000000000000aa=0.001"}});
  CHECK(g.pick(10, "", "", 1) == "medium");
  // medium answers at 0.5 s per token: 0.5 x (1 + 10 x 0.5) = 3 > large's 1.0 x (1 + 0).
  g.told(1, "engine1", 5.0, 10, 0.0);
  CHECK(g.pick(10, "", "", 2) == "large");
  // Spending: the payer's answers cost 0.002 in the last minute, past its 0.001.
  CHECK(g.pick(10, "", "key-00000000000000aa", 3) == "large");
  g.told(3, "engine2", 0.01, 10, 0.002);
  CHECK(g.pick(10, "", "key-00000000000000aa", 4) == "small");
  CHECK(g.pick(10, "", "key-00000000000000bb", 5) == "large");  // another payer has no budget
}

}  // namespace router_cost_quality_tests
