// Drives an answer that waits on engines without holding a thread: step() runs on the exchange's
// strand whenever the signal changes (a token, an end) and every tick (keep-alive lines, a stopped
// server, deadlines), until it returns true. The chain of ticks owns the pump and the pump owns step:
// once the connection is gone the exchange drops the posts, and whatever step captured is released
// (a Generation then cancels its sequences).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include "actors/token_stream.hpp"
#include "http/http_listener.hpp"

namespace tokenhost {

class ExchangePump : public std::enable_shared_from_this<ExchangePump> {
 public:
  static void start(std::shared_ptr<HttpExchange> exchange, const std::shared_ptr<StreamSignal>& signal,
                    std::function<bool()> step, std::chrono::milliseconds tick) {
    auto pump = std::shared_ptr<ExchangePump>(new ExchangePump(std::move(exchange), std::move(step), tick));
    std::weak_ptr<ExchangePump> weak = pump;
    signal->on_change([weak] {
      if (auto p = weak.lock()) p->wake();
    });
    pump->wake();
    pump->schedule_tick();
  }

 private:
  ExchangePump(std::shared_ptr<HttpExchange> exchange, std::function<bool()> step, std::chrono::milliseconds tick)
      : ex_(std::move(exchange)), step_(std::move(step)), tick_(tick) {}

  void wake() {
    if (scheduled_.exchange(true)) return;
    ex_->post([self = shared_from_this()] {
      self->scheduled_ = false;
      self->run();
    });
  }

  void schedule_tick() {
    ex_->post(
        [self = shared_from_this()] {
          self->run();
          if (!self->done_) self->schedule_tick();
        },
        tick_);
  }

  void run() {
    if (done_) return;
    done_ = step_();
    if (done_) step_ = nullptr;  // releases what it holds
  }

  std::shared_ptr<HttpExchange> ex_;
  std::function<bool()> step_;
  const std::chrono::milliseconds tick_;
  std::atomic<bool> scheduled_{false};
  bool done_ = false;  // on the strand only
};

}  // namespace tokenhost
