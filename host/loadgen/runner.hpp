// Load shapes. Closed loop: `concurrency` workers, each sending its next request as soon as its last
// one ends (each worker keeps one connection). Open loop: requests arrive as a Poisson process of
// `rate` per second whatever the server does; a worker (with its own kept-alive connection) takes each
// arrival, and a new worker is started when none is idle, up to `max_concurrency` (0: no cap); past the
// cap, arrivals queue until a worker is free and are sent then (latencies count from the sending).
//
// Conversations (closed loop only): with `turns` > 1 each worker holds a conversation of that many turns
// at a time. A later turn sends the conversation so far (every earlier prompt and answer, as
// Prompt::history) and a new user message; a failed turn ends its conversation early. Each turn is
// one request.
//
// The run ends after `requests` measured requests, or when `duration_s` has passed (no request is sent
// after it; those in flight finish and count), whichever comes first. Before it, `warmup` requests run
// in the same shape and are left out of the results and of the wall time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "loadgen/client.hpp"

namespace tokenhost::loadgen {

struct LoadOptions {
  uint32_t concurrency = 1;      // closed loop: requests in flight
  double rate = 0;               // > 0: open loop, mean arrivals per second
  uint32_t max_concurrency = 0;  // open loop: most requests in flight (0 = no cap)
  uint64_t requests = 0;         // measured requests (0 = until duration_s)
  double duration_s = 0;         // seconds to send requests for (0 = until `requests`)
  uint32_t warmup = 0;           // requests sent first and left out
  uint64_t seed = 0;             // arrival times
  uint32_t turns = 1;            // closed loop: turns per conversation (1: independent requests)
  // Open loop at given times instead (a replay): request i arrives arrival_times[i] seconds after the
  // start (ascending); rate is then unused.
  std::vector<double> arrival_times;
  const std::atomic<bool>* stop = nullptr;  // when set to true, no further request is sent
};

// Progress as it happens, for a progress display; reset when the measured phase starts.
struct LiveCounters {
  std::atomic<bool> warming{false};
  std::atomic<uint64_t> done{0}, failed{0}, tokens{0};
  std::atomic<int64_t> started_ns{0};  // steady_clock time the current phase began
};

struct RunResult {
  std::vector<RequestResult> results;  // the measured requests, in the order they were sent
  double wall_s = 0;                   // first measured request sent .. last one ended
};

// next_prompt is called under a lock, once per request (per conversation with turns > 1) in sending
// order (warmup requests first); next_follow_up, likewise, for each later turn's user message (needed
// when turns > 1). Throws std::invalid_argument for inconsistent options.
RunResult run_load(const EndpointOptions& endpoint, const LoadOptions& load, const std::function<Prompt()>& next_prompt,
                   LiveCounters* live = nullptr, const std::function<Prompt()>& next_follow_up = nullptr);

}  // namespace tokenhost::loadgen
