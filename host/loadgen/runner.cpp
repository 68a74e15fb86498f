#include "loadgen/runner.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "loadgen/arrivals.hpp"

#include <optional>

namespace tokenhost::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Phase {
  Phase(const EndpointOptions& e, const LoadOptions& l, const std::function<Prompt()>& next,
        const std::function<Prompt()>& follow_up, LiveCounters* lc, uint64_t n, double d)
      : endpoint(e), load(l), next_prompt(next), next_follow_up(follow_up), live(lc), count(n), duration_s(d) {}

  const EndpointOptions& endpoint;
  const LoadOptions& load;
  const std::function<Prompt()>& next_prompt;
  const std::function<Prompt()>& next_follow_up;
  LiveCounters* live;
  uint64_t count;     // 0: no limit
  double duration_s;  // 0: no limit
  Clock::time_point t0 = Clock::now();

  std::mutex mu;
  std::vector<RequestResult> results;

  bool stopped() const { return load.stop != nullptr && load.stop->load(); }

  void record(RequestResult r) {
    if (live) {
      live->done.fetch_add(1);
      if (!r.ok) live->failed.fetch_add(1);
    }
    std::lock_guard lock(mu);
    results.push_back(std::move(r));
  }

  RequestResult send(Client& client, const Prompt& p) {
    const double start = seconds_since(t0);
    RequestResult r = client.send(p, live ? &live->tokens : nullptr);
    r.start_s = start;
    return r;
  }

  void closed_loop() {
    uint64_t issued = 0;
    auto worker = [&] {
      std::unique_ptr<Client> client;
      // The worker's conversation: the turn it sends next, the turns before it (user and assistant
      // texts alternating), and their length in words and output tokens (the input estimate).
      uint32_t turn = 0;
      std::vector<std::string> history;
      uint32_t history_words = 0;
      for (;;) {
        Prompt p;
        {
          std::lock_guard lock(mu);
          if ((count > 0 && issued >= count) || (duration_s > 0 && seconds_since(t0) >= duration_s) || stopped()) return;
          ++issued;
          p = turn == 0 ? next_prompt() : next_follow_up();
        }
        if (turn > 0) {
          p.history = history;
          p.words += history_words;
        }
        if (!client) client = std::make_unique<Client>(endpoint);
        RequestResult r = send(*client, p);
        r.turn = turn;
        if (load.turns > 1 && r.ok && turn + 1 < load.turns) {
          history = std::move(p.history);
          history.push_back(std::move(p.text));
          history.push_back(r.text);
          history_words = p.words + uint32_t(r.output_tokens);
          ++turn;
        } else {
          turn = 0;  // the conversation is over (or failed): the next request starts another
          history.clear();
        }
        r.text.clear();  // kept in the history when needed; results hold figures only
        record(std::move(r));
      }
    };
    uint64_t n = load.concurrency;
    if (count > 0) n = std::min<uint64_t>(n, count);
    std::vector<std::thread> threads;
    for (uint64_t i = 0; i < n; ++i) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
  }

  void open_loop() {
    std::deque<Prompt> queue;
    std::condition_variable cv;
    bool closing = false;
    uint32_t idle = 0;
    std::vector<std::thread> workers;
    auto worker = [&] {
      Client client(endpoint);
      std::unique_lock lock(mu);
      for (;;) {
        ++idle;
        cv.wait(lock, [&] { return !queue.empty() || closing; });
        --idle;
        if (queue.empty()) return;
        Prompt p = std::move(queue.front());
        queue.pop_front();
        lock.unlock();
        RequestResult r = send(client, p);
        if (live) {
          live->done.fetch_add(1);
          if (!r.ok) live->failed.fetch_add(1);
        }
        lock.lock();
        results.push_back(std::move(r));
      }
    };
    std::optional<PoissonArrivals> arrivals;
    if (load.arrival_times.empty()) arrivals.emplace(load.rate, load.seed);
    for (uint64_t i = 0; count == 0 || i < count; ++i) {
      if (!arrivals && i >= load.arrival_times.size()) break;
      const double at = arrivals ? arrivals->next_time() : load.arrival_times[i];
      if (duration_s > 0 && at >= duration_s) break;
      auto when = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at));
      while (!stopped() && Clock::now() < when)
        std::this_thread::sleep_for(std::min<Clock::duration>(when - Clock::now(), std::chrono::milliseconds(50)));
      if (stopped()) break;
      std::lock_guard lock(mu);
      queue.push_back(next_prompt());
      if (idle < queue.size() && (load.max_concurrency == 0 || workers.size() < load.max_concurrency))
        workers.emplace_back(worker);
      cv.notify_one();
    }
    {
      std::lock_guard lock(mu);
      closing = true;
      if (stopped()) queue.clear();
    }
    cv.notify_all();
    for (auto& t : workers) t.join();
  }

  RunResult run() {
    if (live) {
      live->done = 0;
      live->failed = 0;
      live->tokens = 0;
      live->started_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
    }
    if (load.rate > 0 || !load.arrival_times.empty())
      open_loop();
    else
      closed_loop();
    RunResult r;
    r.wall_s = seconds_since(t0);
    r.results = std::move(results);
    std::stable_sort(r.results.begin(), r.results.end(),
                     [](const RequestResult& a, const RequestResult& b) { return a.start_s < b.start_s; });
    if (!r.results.empty()) {
      // The wall time runs from the first sending, not from the phase start (an open loop's first
      // arrival comes after a random gap).
      double first = r.results.front().start_s, end = 0;
      for (const auto& x : r.results) end = std::max(end, x.start_s + x.latency_s);
      r.wall_s = end - first;
    }
    return r;
  }
};

}  // namespace

RunResult run_load(const EndpointOptions& endpoint, const LoadOptions& load, const std::function<Prompt()>& next_prompt,
                   LiveCounters* live, const std::function<Prompt()>& next_follow_up) {
  if (load.rate < 0) throw std::invalid_argument("the request rate must not be negative");
  if (load.turns == 0) throw std::invalid_argument("a conversation has at least 1 turn");
  if (load.turns > 1 && (load.rate > 0 || !load.arrival_times.empty()))
    throw std::invalid_argument("conversations (more than 1 turn) need the closed loop: a turn is sent when the last one ends");
  if (load.turns > 1 && !next_follow_up) throw std::invalid_argument("conversations need a source of follow-up messages");
  if (load.rate == 0 && load.concurrency == 0) throw std::invalid_argument("concurrency must be at least 1");
  if (load.requests == 0 && load.duration_s <= 0) throw std::invalid_argument("give a number of requests or a duration");
  parse_url(endpoint.url);  // a bad URL fails here, not in every request
  if (load.warmup > 0) {
    if (live) live->warming = true;
    Phase warm(endpoint, load, next_prompt, next_follow_up, live, load.warmup, 0);
    warm.run();
    if (live) live->warming = false;
  }
  Phase measured(endpoint, load, next_prompt, next_follow_up, live, load.requests, load.duration_s);
  return measured.run();
}

}  // namespace tokenhost::loadgen
