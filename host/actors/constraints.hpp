// Structured output in a worker (th_constraint.h): the constraint plugin's programs, compiled once per
// distinct source and kept while used or among the most recent, each constrained sequence's state, and
// before sampling the allowed tokens of every row of a step, draft rows included.
//
// A sequence's state follows its generated tokens: before each step it is moved past the tokens the
// engine appended since the last (all of them after a preemption or a swap of the plugin), so the
// sampled run needs no separate commit and a rejected draft leaves nothing behind. A draft row's state
// is its parent row's, cloned and moved past the draft token; the clones live for the step only.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/constraint_source.hpp"
#include "base/step.hpp"
#include "plugin/instance.hpp"

namespace tokenhost {

// The allowed tokens of one sampled item's rows (row 0: after its committed text; row r + 1: after
// draft token r along its path). Empty rows: the item is not constrained.
struct RowMasks {
  std::vector<std::vector<uint32_t>> allowed;  // per row: a bit per token (bit t % 32 of word t / 32)
  std::vector<uint8_t> live;                   // per row: 0 where the draft path to it left the constraint
  std::vector<uint8_t> complete;               // per row: the text may end there (EOS allowed)
  int32_t eos = -1;                            // the token that ends the sequence
  std::string error;                           // the sequence cannot go on: why (its rows are empty)
  bool constrained() const { return !allowed.empty() || !error.empty(); }
  // Sets every disallowed token's logit of row r to -infinity. Returns false (logits unchanged) when
  // the row allows no token at all.
  bool apply(size_t r, std::vector<float>& logits) const;
};

class Constraints {
 public:
  explicit Constraints(std::string engine);
  Constraints(const Constraints&) = delete;
  Constraints& operator=(const Constraints&) = delete;
  ~Constraints();

  // The masks of every sampled item of batch, in the order sample_all takes them (an unconstrained
  // item's is empty). plugin: the engine's constraint slot (may be NULL: constrained items then get an
  // error). A plugin that throws comes out as PluginFault; a status it returns fails that item only.
  std::vector<RowMasks> prepare(const std::shared_ptr<PluginInstance>& plugin, const StepBatch& batch);
  // The sequence ended: its state goes.
  void release(uint64_t seq_id);
  size_t programs() const { return programs_.size(); }
  size_t sequences() const { return seqs_.size(); }

 private:
  struct Program;
  struct State;
  struct Seq;
  std::shared_ptr<Program> program(const std::shared_ptr<PluginInstance>& plugin, const ConstraintSource& source,
                                   std::string& error);

  std::string engine_;
  // Most recently used first; the first kKeep stay compiled while no sequence uses them.
  std::list<std::pair<std::string, std::shared_ptr<Program>>> programs_;
  std::unordered_map<uint64_t, std::unique_ptr<Seq>> seqs_;
};

}  // namespace tokenhost
