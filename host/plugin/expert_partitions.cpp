#include "plugin/expert_partitions.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "plugin/instance.hpp"
#include "plugin/step_plugins.hpp"

namespace tokenhost {

ExpertPartitions::ExpertPartitions(std::vector<std::shared_ptr<ComputePool>> pools, std::vector<std::string> names,
                                   uint32_t n_layers, uint32_t n_experts, uint32_t slots_per_device)
    : pools_(std::move(pools)),
      names_(std::move(names)),
      placement_(n_layers, n_experts, uint32_t(pools_.size()), slots_per_device),
      seconds_(size_t(n_layers) * pools_.size(), 0.0),
      total_seconds_(pools_.size(), 0.0),
      parts_(pools_.size()) {
  // Every runner first, then their threads: a thread reads runners_, which must not grow under it.
  for (size_t p = 0; p < pools_.size(); ++p) runners_.push_back(std::make_unique<Runner>());
  for (size_t p = 0; p < pools_.size(); ++p) runners_[p]->thread = std::thread([this, p] { serve(p); });
}

ExpertPartitions::~ExpertPartitions() {
  for (auto& r : runners_) {
    {
      std::lock_guard lock(r->mutex);
      r->stop = true;
    }
    r->wake.notify_one();
  }
  for (auto& r : runners_) r->thread.join();
}

void ExpertPartitions::serve(size_t partition) {
  Runner& r = *runners_[partition];
  const UseComputePool pool(pools_[partition].get());  // this thread's products run there (pinned with it)
  std::unique_lock lock(r.mutex);
  for (;;) {
    r.wake.wait(lock, [&] { return r.stop || r.job; });
    if (r.stop) return;
    auto job = std::move(r.job);
    r.job = nullptr;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    r.error = error;
    r.busy = false;
    r.done.notify_one();
  }
}

void ExpertPartitions::experts(const PluginInstance& moe, const th_moe_experts_args& a) {
  const size_t k = a.k, dim = a.dim;
  placement_.assign(a.layer, a.expert_ids, a.expert_weights, size_t(a.n_tokens) * k, device_of_choice_);
  // Each partition's tokens: those with a choice it computes; their other choices weigh 0 there.
  for (size_t p = 0; p < parts_.size(); ++p) {
    Part& part = parts_[p];
    part.tokens.clear();
    for (uint32_t t = 0; t < a.n_tokens; ++t)
      for (size_t j = 0; j < k; ++j)
        if (device_of_choice_[t * k + j] == int32_t(p)) {
          part.tokens.push_back(t);
          break;
        }
    const size_t n = part.tokens.size();
    part.x.resize(n * dim);
    part.ids.resize(n * k);
    part.weights.resize(n * k);
    part.out.resize(n * dim);
    for (size_t r = 0; r < n; ++r) {
      const uint32_t t = part.tokens[r];
      std::copy_n(a.x + t * dim, dim, &part.x[r * dim]);
      for (size_t j = 0; j < k; ++j) {
        part.ids[r * k + j] = a.expert_ids[t * k + j];
        part.weights[r * k + j] = device_of_choice_[t * k + j] == int32_t(p) ? a.expert_weights[t * k + j] : 0.0f;
      }
    }
  }
  auto run_part = [&](size_t p) {
    Part& part = parts_[p];
    const auto started = std::chrono::steady_clock::now();
    th_moe_experts_args args = a;
    args.n_tokens = uint32_t(part.tokens.size());
    args.x = part.x.data();
    args.expert_ids = part.ids.data();
    args.expert_weights = part.weights.data();
    args.shared_expert = nullptr;
    args.out = part.out.data();
    th_error err;
    if (th_status s = moe.call(&th_moe_vtable::experts, "experts", moe.handle(), &args, &err)) {
      const std::string partition = " (expert partition " + names_[p] + ")";
      try {
        throw_plugin_failure(moe, "experts", s, err);
      } catch (const KvExhausted& e) {
        throw std::runtime_error(e.what() + partition);
      } catch (const std::runtime_error& e) {
        throw std::runtime_error(e.what() + partition);
      }
    }
    part.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  for (size_t p = 0; p < runners_.size(); ++p) {
    parts_[p].seconds = 0;
    if (parts_[p].tokens.empty()) continue;
    Runner& r = *runners_[p];
    std::lock_guard lock(r.mutex);
    r.job = [&run_part, p] { run_part(p); };
    r.busy = true;
    r.error = nullptr;
    r.wake.notify_one();
  }
  std::exception_ptr first;
  for (size_t p = 0; p < runners_.size(); ++p) {
    Runner& r = *runners_[p];
    std::unique_lock lock(r.mutex);
    r.done.wait(lock, [&] { return !r.busy; });
    if (r.error && !first) first = r.error;
    r.error = nullptr;
  }
  if (first) std::rethrow_exception(first);
  for (size_t p = 0; p < parts_.size(); ++p) {
    seconds_[size_t(a.layer) * parts_.size() + p] += parts_[p].seconds;
    total_seconds_[p] += parts_[p].seconds;
  }
  // The sum in partition order: a token's result does not depend on the other tokens of the step.
  std::fill(a.out, a.out + size_t(a.n_tokens) * dim, 0.0f);
  for (const Part& part : parts_)
    for (size_t r = 0; r < part.tokens.size(); ++r) {
      float* out = a.out + size_t(part.tokens[r]) * dim;
      const float* o = &part.out[r * dim];
      for (size_t c = 0; c < dim; ++c) out[c] += o[c];
    }
}

std::vector<double> ExpertPartitions::take_seconds(uint32_t layer) {
  const auto first = seconds_.begin() + ptrdiff_t(size_t(layer) * parts_.size());
  std::vector<double> out(first, first + ptrdiff_t(parts_.size()));
  std::fill(first, first + ptrdiff_t(parts_.size()), 0.0);
  return out;
}

RebalanceOutcome ExpertPartitions::rebalance(const PluginInstance& moe, uint32_t layer, const std::vector<uint64_t>& tokens) {
  RebalanceOutcome outcome;
  const std::vector<double> seconds = take_seconds(layer);
  outcome.imbalance_before = outcome.imbalance_after = placement_.imbalance(layer, tokens);
  if (moe.fn(&th_moe_vtable::rebalance) == nullptr) return outcome;
  outcome.called = true;
  const uint32_t n_experts = placement_.n_experts(), devices = placement_.devices(), per_device = placement_.slots_per_device(layer);
  if (tokens.size() != n_experts) {
    outcome.error = std::to_string(tokens.size()) + " token counts for " + std::to_string(n_experts) + " experts";
    return outcome;
  }
  const std::vector<int32_t> now_devices = placement_.first_devices(layer);
  const std::vector<int32_t>& now_slots = placement_.slots(layer);
  th_moe_load load{};
  load.struct_size = sizeof load;
  load.layer = layer;
  load.n_experts = n_experts;
  load.n_devices = devices;
  load.tokens_per_expert = tokens.data();
  load.placement = now_devices.data();
  load.slots_per_device = per_device;
  load.slot_expert = now_slots.data();
  load.device_seconds = seconds.data();
  std::vector<int32_t> out_devices = now_devices, out_slots(now_slots.size(), -1);
  th_moe_placement out{};
  out.struct_size = sizeof out;
  out.placement = out_devices.data();
  out.slot_expert = out_slots.data();
  th_error err;
  try {
    if (th_status s = moe.call(&th_moe_vtable::rebalance, "rebalance", moe.handle(), &load, &out, &err)) {
      outcome.error = moe.id() + " rebalance failed with " + status_name(s) + ": " + err.text();
      return outcome;
    }
  } catch (const std::exception& e) {  // a PluginFault, logged where it was made: the placement stays
    outcome.error = e.what();
    return outcome;
  }
  const bool by_slots = std::any_of(out_slots.begin(), out_slots.end(), [](int32_t e) { return e != -1; });
  ExpertPlacement next = placement_;
  const std::string wrong = by_slots ? next.set_slots(layer, out_slots) : next.set_devices(layer, out_devices);
  if (!wrong.empty()) {
    outcome.error = moe.id() + " rebalance answered a placement the engine refuses: " + wrong;
    return outcome;
  }
  if (next.slots(layer) == placement_.slots(layer)) return outcome;
  placement_ = std::move(next);
  outcome.changed = true;
  outcome.imbalance_after = placement_.imbalance(layer, tokens);
  return outcome;
}

}  // namespace tokenhost
