#include "actors/token_stream.hpp"

namespace tokenhost {

uint64_t StreamSignal::version() const {
  std::lock_guard lock(mutex_);
  return version_;
}

void StreamSignal::notify() {
  std::shared_ptr<const std::function<void()>> callback;
  {
    std::lock_guard lock(mutex_);
    ++version_;
    callback = on_change_;
  }
  changed_.notify_all();
  if (callback) (*callback)();
}

void StreamSignal::on_change(std::function<void()> fn) {
  std::lock_guard lock(mutex_);
  on_change_ = std::make_shared<const std::function<void()>>(std::move(fn));
}

void StreamSignal::wait(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return version_ != seen; });
}

TokenStream::TokenStream() = default;
TokenStream::~TokenStream() = default;

void TokenStream::push(const SampledToken& token) {
  std::shared_ptr<StreamSignal> signal;
  {
    std::lock_guard lock(mutex_);
    if (result_) return;
    tokens_.push_back(token);
    signal = signal_;
  }
  notify(signal);
}

void TokenStream::finish(const GenerateResult& result) {
  std::shared_ptr<StreamSignal> signal;
  {
    std::lock_guard lock(mutex_);
    if (result_) return;
    result_ = std::make_unique<GenerateResult>(result);
    signal = signal_;
  }
  notify(signal);
}

TokenStream::Update TokenStream::wait(size_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return tokens_.size() > seen || result_ != nullptr; });
  Update u;
  if (tokens_.size() > seen) u.tokens.assign(tokens_.begin() + long(seen), tokens_.end());
  if (result_) u.result = *result_;
  return u;
}

void TokenStream::cancel() {
  std::shared_ptr<StreamSignal> signal;
  {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
    signal = signal_;
  }
  notify(signal);
}

void TokenStream::listen(std::shared_ptr<StreamSignal> signal) {
  std::lock_guard lock(mutex_);
  signal_ = std::move(signal);
}

void TokenStream::notify(const std::shared_ptr<StreamSignal>& signal) {
  changed_.notify_all();
  if (signal) signal->notify();
}

bool TokenStream::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

}  // namespace tokenhost
