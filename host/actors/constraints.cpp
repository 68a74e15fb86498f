#include "actors/constraints.hpp"

#include <cmath>

#include <spdlog/spdlog.h>

#include "runtime/sampling.hpp"
#include "util/text.hpp"

namespace tokenhost {

namespace {
constexpr size_t kKeep = 32;  // compiled programs kept while no sequence uses them

std::string failure(const PluginInstance& p, const char* call, th_status st, const th_error& err) {
  return p.id() + " " + call + "() failed with " + status_name(st) + (err.messages.empty() ? std::string() : ": " + err.text());
}
}  // namespace

bool RowMasks::apply(size_t r, std::vector<float>& logits) const {
  const std::vector<uint32_t>& bits = allowed.at(r);
  const size_t n_bits = bits.size() * 32;
  bool any = false;
  for (size_t t = 0; t < logits.size(); ++t) {
    const bool ok = (t < n_bits && (bits[t / 32] >> (t % 32)) & 1u) || (int64_t(t) == eos && complete.at(r));
    if (ok) any = true;
    else logits[t] = -INFINITY;
  }
  return any;
}

struct Constraints::Program {
  std::shared_ptr<PluginInstance> plugin;
  th_constraint_program* handle = nullptr;
  ~Program() {
    if (handle == nullptr) return;
    try {
      plugin->call(&th_constraint_vtable::release, "release", plugin->handle(), handle);
    } catch (const PluginFault&) {
      // Logged; the program is the plugin's to lose.
    }
  }
};

// A state and the program it belongs to (released after its last state).
struct Constraints::State {
  std::shared_ptr<Program> program;
  th_constraint_state* handle = nullptr;
  PluginInstance& plugin() const { return *program->plugin; }
  ~State() {
    if (handle == nullptr) return;
    try {
      plugin().call(&th_constraint_vtable::free_state, "free_state", plugin().handle(), handle);
    } catch (const PluginFault&) {
    }
  }
  // A copy (NULL and error set when the plugin refuses).
  std::unique_ptr<State> clone(std::string& error) const {
    auto out = std::make_unique<State>();
    out->program = program;
    th_error err;
    if (th_status st = plugin().call(&th_constraint_vtable::clone, "clone", plugin().handle(), handle, &out->handle, &err)) {
      out->handle = nullptr;
      error = failure(plugin(), "clone", st, err);
      return nullptr;
    }
    return out;
  }
  // Moves past token; false when the plugin refuses it (the state is then as it was).
  bool advance(int32_t token, std::string* error = nullptr) {
    th_error err;
    th_status st = plugin().call(&th_constraint_vtable::advance, "advance", plugin().handle(), handle, token, &err);
    if (st != TH_OK && error != nullptr) *error = failure(plugin(), "advance", st, err);
    return st == TH_OK;
  }
};

struct Constraints::Seq {
  std::string key;
  std::unique_ptr<State> state;  // after the first `advanced` generated tokens
  size_t advanced = 0;
};

Constraints::Constraints(std::string engine) : engine_(std::move(engine)) {}

Constraints::~Constraints() {
  seqs_.clear();  // states before the programs they hold
  programs_.clear();
}

std::shared_ptr<Constraints::Program> Constraints::program(const std::shared_ptr<PluginInstance>& plugin,
                                                           const ConstraintSource& source, std::string& error) {
  const std::string key = source.key();
  for (auto it = programs_.begin(); it != programs_.end(); ++it) {
    if (it->first != key || it->second->plugin != plugin) continue;
    programs_.splice(programs_.begin(), programs_, it);  // most recent first
    return it->second;
  }
  auto p = std::make_shared<Program>();
  p->plugin = plugin;
  const th_constraint_source src{sizeof(th_constraint_source), source.type.c_str(), source.text.c_str(), source.gbnf.c_str()};
  th_error err;
  const auto started = std::chrono::steady_clock::now();
  if (th_status st = plugin->call(&th_constraint_vtable::compile, "compile", plugin->handle(), &src, &p->handle, &err)) {
    p->handle = nullptr;
    error = "the constraint (" + source.describe() + ") could not be compiled: " + failure(*plugin, "compile", st, err);
    return nullptr;
  }
  if (p->handle == nullptr) {
    error = plugin->id() + " compile() returned TH_OK without a program";
    return nullptr;
  }
  spdlog::info("engine {}: {} compiled a {} constraint in {:.2f} ms", engine_, plugin->id(), source.describe(),
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
  programs_.emplace_front(key, p);
  // Beyond kKeep, the least recent go once no sequence holds them (a held one stays alive through its
  // states' references anyway).
  while (programs_.size() > kKeep) programs_.pop_back();
  return p;
}

void Constraints::release(uint64_t seq_id) { seqs_.erase(seq_id); }

std::vector<RowMasks> Constraints::prepare(const std::shared_ptr<PluginInstance>& plugin, const StepBatch& batch) {
  std::vector<RowMasks> out;
  // Every live row state of the step, for one masks() call: its item (in out) and row.
  std::vector<std::unique_ptr<State>> row_states;
  std::vector<std::pair<size_t, size_t>> row_of;
  const PluginVocab* vocab = plugin ? plugin->vocab() : nullptr;
  // A swapped plugin: the old one's programs go (their sequences' states, rebuilt below, drop theirs).
  programs_.remove_if([&](const auto& p) { return p.second->plugin != plugin; });
  auto control = [&](int32_t t) {
    return vocab == nullptr || t < 0 || size_t(t) >= vocab->attrs.size() || vocab->attrs[size_t(t)] != TH_TOKEN_TEXT;
  };
  for (const StepItem& item : batch.items) {
    if (!item.sample) continue;
    RowMasks& m = out.emplace_back();
    if (!item.context || !item.context->constraint) continue;
    const ConstraintSource& source = *item.context->constraint;
    if (!plugin || vocab == nullptr) {
      m.error = "engine " + engine_ + " has no constraint plugin for the request's " + source.type +
                (plugin ? " (its model has no vocabulary)" : " (its constraint slot is empty)");
      continue;
    }
    m.eos = vocab->eos;
    // The sequence's state, made at its first sampled step (again after a swap of the plugin).
    std::unique_ptr<Seq>& q = seqs_[item.seq_id];
    if (!q || q->state->program->plugin != plugin || q->key != source.key()) {
      q = std::make_unique<Seq>();
      q->key = source.key();
      std::shared_ptr<Program> p = program(plugin, source, m.error);
      if (!p) {
        seqs_.erase(item.seq_id);
        continue;
      }
      q->state = std::make_unique<State>();
      q->state->program = p;
      th_error err;
      if (th_status st = plugin->call(&th_constraint_vtable::start, "start", plugin->handle(), p->handle, &q->state->handle, &err)) {
        q->state->handle = nullptr;
        m.error = failure(*plugin, "start", st, err);
        seqs_.erase(item.seq_id);
        continue;
      }
    }
    // Past the tokens generated since the last step (every one after a preemption).
    const std::vector<int32_t>& tokens = item.context->tokens;
    const size_t generated = tokens.size() - std::min(tokens.size(), item.context->prompt_tokens);
    for (; q->advanced < generated; ++q->advanced) {
      const int32_t t = tokens[item.context->prompt_tokens + q->advanced];
      if (control(t)) continue;  // an end of sequence the request ignored
      std::string why;
      if (!q->state->advance(t, &why)) {
        m.error = "the constraint refused generated token " + std::to_string(t) + ": " + why;
        break;
      }
    }
    if (!m.error.empty()) {
      seqs_.erase(item.seq_id);
      continue;
    }
    // Row 0 after the text so far; each draft row after its parent row and its draft token.
    const size_t rows = item.n_draft > 0 ? item.n_draft + 1 : 1;
    const int32_t* draft = item.tokens.data() + item.tokens.size() - item.n_draft;
    std::vector<State*> state_of(rows, nullptr);
    m.allowed.assign(rows, {});
    m.live.assign(rows, 0);
    m.complete.assign(rows, 0);
    auto add_row = [&](size_t r, std::unique_ptr<State> st) {
      state_of[r] = st.get();
      m.live[r] = 1;
      row_of.emplace_back(out.size() - 1, r);
      row_states.push_back(std::move(st));
    };
    std::unique_ptr<State> first = q->state->clone(m.error);
    if (!first) {
      m.allowed.clear();
      continue;
    }
    add_row(0, std::move(first));
    for (uint32_t c = 0; c < item.n_draft; ++c) {
      const int32_t parent = item.draft_parent.empty() ? int32_t(c) - 1 : item.draft_parent[c];
      State* from = state_of[size_t(parent + 1)];
      if (from == nullptr || control(draft[c])) continue;  // no accepted path reaches this row
      std::string ignored;
      std::unique_ptr<State> st = from->clone(ignored);
      if (st && st->advance(draft[c])) add_row(c + 1, std::move(st));  // else the draft leaves the constraint here
    }
  }
  if (row_states.empty()) return out;
  // One call for every row of the step.
  const uint32_t words = uint32_t((vocab->attrs.size() + 31) / 32);
  std::vector<uint32_t> bits(row_states.size() * words, 0);
  std::vector<uint8_t> complete(row_states.size(), 0);
  std::vector<th_constraint_state*> handles;
  for (const auto& st : row_states) handles.push_back(st->handle);
  th_constraint_mask_args args{sizeof(th_constraint_mask_args), handles.data(), uint32_t(handles.size()), words, bits.data(),
                               complete.data()};
  th_error err;
  if (th_status st = plugin->call(&th_constraint_vtable::masks, "masks", plugin->handle(), &args, &err)) {
    const std::string why = failure(*plugin, "masks", st, err);
    for (const auto& [item, row] : row_of) out[item].error = why, out[item].allowed.clear();
    return out;
  }
  for (size_t i = 0; i < row_of.size(); ++i) {
    const auto [item, row] = row_of[i];
    if (!out[item].error.empty()) continue;
    std::vector<uint32_t>& mask = out[item].allowed[row];
    mask.assign(bits.begin() + long(i * words), bits.begin() + long((i + 1) * words));
    // The host decides the end and never offers control tokens: their bits, and any past the
    // vocabulary, are not the plugin's to set.
    for (uint32_t w = 0; w < words; ++w) mask[w] &= vocab->text_bits[w];
    out[item].complete[row] = complete[i] != 0;
  }
  return out;
}

}  // namespace tokenhost
