#include "server/engine_handle.hpp"

#include <algorithm>
#include <stdexcept>

#include "server/engine_table.hpp"

namespace tokenhost {

// --- LocalEngine ---

LocalEngine::LocalEngine(caf::actor_system& system, EngineDecl decl, EngineFacts facts, engine_actor actor, worker_actor worker,
                         std::shared_ptr<EngineVitals> vitals)
    : EngineHandle(std::move(decl), std::move(facts)), system_(system), actor_(std::move(actor)), worker_(std::move(worker)),
      vitals_(std::move(vitals)) {
  actor_->attach_functor([vitals = vitals_, &system](const caf::error& reason) {
    // An ordinary end: retired and done, drained, or stopped by the server. Anything else is a fault.
    const bool ordinary = !reason || reason == caf::exit_reason::normal || reason == caf::exit_reason::user_shutdown;
    vitals->ended(ordinary ? std::string() : system.render(reason));
  });
}

std::string LocalEngine::down_reason() const { return vitals_->down_reason(); }

std::optional<PluginFault> LocalEngine::fault() const { return vitals_->fault(); }

void LocalEngine::abandon(const std::string& why) {
  vitals_->note_hung(why);
  // The worker ends when it next reads its mailbox: at once when the engine actor is the one in the
  // long call, else when its step returns. The engine follows it (its down handler), then.
  caf::anon_send_exit(worker_, caf::exit_reason::kill);
}

RoutedEngine LocalEngine::routed() const {
  RoutedEngine r{name(), model(), actor_, facts().prefix_summary, vitals_};
  r.capacity = decl().max_step_seqs;
  r.role = decl().role;
  return r;
}

nlohmann::json LocalEngine::status() {
  caf::scoped_actor self{system_};
  nlohmann::json out;
  self->request(actor_, std::chrono::seconds(10), status_atom::value, std::string())
      .receive([&](StatusJson& s) { out = nlohmann::json::parse(s.json); },
               [&](caf::error& e) { out = {{"error", system_.render(e)}}; });
  return out;
}

SwapResult LocalEngine::swap(SlotSwap swap) {
  caf::scoped_actor self{system_};
  SwapResult out{false, "no reply"};
  self->request(actor_, std::chrono::seconds(60), swap_atom::value, std::move(swap))
      .receive([&](SwapResult& r) { out = std::move(r); },
               [&](caf::error& e) { out = SwapResult{false, "swap failed: " + system_.render(e)}; });
  return out;
}

std::pair<KvState, KvState> LocalEngine::flush_prefix_cache() {
  caf::scoped_actor self{system_};
  KvState before, after;
  auto ask = [&](auto atom, KvState& out) {
    self->request(worker_, std::chrono::seconds(60), atom)
        .receive([&](const KvState& kv) { out = kv; },
                 [&](caf::error& e) { throw std::runtime_error(system_.render(e)); });
  };
  ask(status_atom::value, before);
  ask(flush_atom::value, after);
  return {before, after};
}

void LocalEngine::stop() {
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(worker_, caf::exit_reason::user_shutdown);
}

// --- EngineTable ---

EngineTable::Ptr EngineTable::find(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(name);
  return it == live_.end() ? nullptr : it->second;
}

std::vector<std::string> EngineTable::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& [name, e] : live_) out.push_back(name);
  return out;
}

std::vector<EngineTable::Ptr> EngineTable::live() const {
  std::lock_guard lock(mutex_);
  std::vector<Ptr> out;
  for (const auto& [name, e] : live_) out.push_back(e);
  return out;
}

std::vector<EngineTable::Ptr> EngineTable::retiring() {
  std::lock_guard lock(mutex_);
  prune();
  return retired_;
}

bool EngineTable::is_retiring(const std::string& name) {
  std::lock_guard lock(mutex_);
  prune();
  return std::any_of(retired_.begin(), retired_.end(), [&](const Ptr& e) { return e->name() == name; });
}

bool EngineTable::add(Ptr engine) {
  std::lock_guard lock(mutex_);
  const std::string name = engine->name();
  return live_.emplace(name, std::move(engine)).second;
}

EngineTable::Ptr EngineTable::retire(const std::string& name, Ptr successor) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(name);
  if (it == live_.end()) return nullptr;
  Ptr old = it->second;
  retired_.push_back(old);
  if (successor) it->second = std::move(successor);
  else live_.erase(it);
  return old;
}

uint64_t EngineTable::kv_positions_of(const std::string& model) const {
  std::lock_guard lock(mutex_);
  uint64_t n = 0;
  for (const auto& [name, e] : live_)  // a down or hung engine's pool takes no request
    if (e->model() == model && e->serving()) n += e->facts().kv_positions;
  return n;
}

size_t EngineTable::engines_serving(const std::string& model) const {
  std::lock_guard lock(mutex_);
  return size_t(std::count_if(live_.begin(), live_.end(), [&](const auto& kv) { return kv.second->model() == model; }));
}

std::string EngineTable::first_model() const {
  std::lock_guard lock(mutex_);
  return live_.empty() ? std::string() : live_.begin()->second->model();
}

std::vector<EngineTable::Ptr> EngineTable::take_all() {
  std::lock_guard lock(mutex_);
  std::vector<Ptr> out;
  for (auto& [name, e] : live_) out.push_back(std::move(e));
  for (auto& e : retired_) out.push_back(std::move(e));
  live_.clear();
  retired_.clear();
  return out;
}

void EngineTable::prune() {
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(), [](const Ptr& e) { return e->stopped(); }), retired_.end());
}

}  // namespace tokenhost
