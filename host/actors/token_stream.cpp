#include "actors/token_stream.hpp"

namespace tokenhost {

TokenStream::TokenStream() = default;
TokenStream::~TokenStream() = default;

void TokenStream::push(const SampledToken& token) {
  {
    std::lock_guard lock(mutex_);
    if (result_) return;
    tokens_.push_back(token);
  }
  changed_.notify_all();
}

void TokenStream::finish(const GenerateResult& result) {
  {
    std::lock_guard lock(mutex_);
    if (result_) return;
    result_ = std::make_unique<GenerateResult>(result);
  }
  changed_.notify_all();
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
  {
    std::lock_guard lock(mutex_);
    cancelled_ = true;
  }
  changed_.notify_all();
}

bool TokenStream::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

}  // namespace tokenhost
