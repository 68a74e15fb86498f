// A router plugin instance and the request it is asked about, for the router plugins' tests: n healthy
// idle candidates named engine0.., a prompt of n_tokens, and the cached tokens per candidate (ABI 1.5).
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "harness.hpp"

namespace tokenhost::testing {

struct RouterUnderTest {
  std::shared_ptr<PluginInstance> inst;
  std::vector<std::string> names;
  std::vector<th_route_candidate> candidates;
  std::vector<uint32_t> cached;
  std::vector<uint32_t> cascade;
  uint32_t n_tokens = 0;
  bool pass_cached = true;  // false: the request's cached_tokens is NULL
  std::string last_error;

  RouterUnderTest(const std::string& id, uint32_t n, const toml::table& config = {})
      : inst(make_plugin(id, model_spec(), config)), names(n), candidates(n), cached(n, 0), cascade(n) {
    for (uint32_t i = 0; i < n; ++i) {
      names[i] = "engine" + std::to_string(i);
      candidates[i] = th_route_candidate{names[i].c_str(), "m", 0, 0, 0.0, 1.0, 1.0, 1};
    }
  }
  th_status route(th_route_decision& d) {
    th_route_request req{};
    req.struct_size = sizeof(th_route_request);
    req.model = "m";
    req.prompt = "";
    req.session_key = "";
    req.n_tokens = n_tokens;
    req.candidates = candidates.data();
    req.n_candidates = uint32_t(candidates.size());
    req.cached_tokens = pass_cached ? cached.data() : nullptr;
    d = th_route_decision{};
    d.struct_size = sizeof(th_route_decision);
    d.cascade = cascade.data();
    d.target = 12345;
    th_error err;
    const th_status s = inst->vtable<th_router_vtable>().route(inst->handle(), &req, &d, &err);
    last_error = err.text();
    return s;
  }
  uint32_t next() {
    th_route_decision d;
    REQUIRE(route(d) == TH_OK);
    REQUIRE(d.action == TH_ROUTE_TARGET);
    REQUIRE(d.target < candidates.size());
    return d.target;
  }
};

}  // namespace tokenhost::testing
