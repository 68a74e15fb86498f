// The channel between an engine and the client waiting on one request. The engine appends each token
// as its step samples it; the HTTP thread serving the client reads them as they come (streaming) or
// waits for the end; a client that goes away marks the stream cancelled so the engine drops the
// sequence. Every member is thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "actors/request.hpp"

namespace tokenhost {

// One reader's wake-up for several streams (the n choices of one request): every change of a stream
// that listens to it counts once, and the reader sleeps until the count moves.
class StreamSignal {
 public:
  uint64_t version() const;
  void notify();
  // Returns once version() != seen, or after timeout.
  void wait(uint64_t seen, std::chrono::milliseconds timeout) const;
  // fn also runs after every change, on the thread that made it (an engine's): an asynchronous
  // reader schedules its work from it. It must not block.
  void on_change(std::function<void()> fn);

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  uint64_t version_ = 0;
  std::shared_ptr<const std::function<void()>> on_change_;
};

class TokenStream {
 public:
  TokenStream();
  ~TokenStream();

  // Engine side: one sampled token (with its log-probabilities when asked for).
  void push(const SampledToken& token);
  // The request's end; later pushes are ignored. Called once, by whoever delivers the result.
  void finish(const GenerateResult& result);

  // Reader side. Waits until there are tokens past `seen`, the stream ends, or `timeout` passes, and
  // returns what is new: tokens [seen, seen + tokens.size()) and, once ended, the result.
  struct Update {
    std::vector<SampledToken> tokens;
    std::optional<GenerateResult> result;  // set once the request has ended
  };
  Update wait(size_t seen, std::chrono::milliseconds timeout);

  // The client is gone or does not want more (a stop string matched): the engine finishes the
  // sequence with "cancelled" at its next step boundary and frees its KV blocks.
  void cancel();
  bool cancelled() const;

  // Every later push, finish and cancel also notifies signal (a reader of several streams).
  void listen(std::shared_ptr<StreamSignal> signal);

 private:
  // Wakes this stream's readers and then `signal` (signal_ as read under the lock by the caller).
  void notify(const std::shared_ptr<StreamSignal>& signal);

  mutable std::mutex mutex_;
  std::shared_ptr<StreamSignal> signal_;
  std::condition_variable changed_;
  std::vector<SampledToken> tokens_;
  std::unique_ptr<GenerateResult> result_;
  bool cancelled_ = false;
};

}  // namespace tokenhost
