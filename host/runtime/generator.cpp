#include "runtime/generator.hpp"

#include "backends/backend.hpp"
#include "plugin/step_plugins.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

namespace tokenhost {

Generator::Generator(std::shared_ptr<const ModelWeights> weights, std::shared_ptr<PluginInstance> attention,
                     std::shared_ptr<PluginInstance> kvcache, uint32_t prefill_chunk,
                     std::shared_ptr<PluginInstance> moe)
    : weights_(std::move(weights)), prefill_chunk_(std::max<uint32_t>(prefill_chunk, 1)) {
  if (!kvcache) throw std::invalid_argument("the generator needs a kvcache instance");
  backend_ = find_backend(kvcache->device().kind);
  if (backend_ == nullptr)
    throw std::invalid_argument(std::string("no backend drives ") + device_kind_name(kvcache->device().kind) + " devices");
  plugins_.set(slot_of(TH_KIND_ATTENTION), std::move(attention));
  plugins_.set(slot_of(TH_KIND_KVCACHE), std::move(kvcache));
  plugins_.set(slot_of(TH_KIND_MOE), std::move(moe));
}

Generator::~Generator() = default;

int32_t Generator::greedy(const std::vector<float>& logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The sequence's blocks go back to the pool whatever happens.
struct Generator::SequenceLease {
  const PluginInstance& kv;
  uint64_t seq;
  ~SequenceLease() { kv.call(&th_kvcache_vtable::seq_free, "seq_free", kv.handle(), seq); }
};

void Generator::prefill(uint64_t seq, const std::vector<int32_t>& tokens, const ChunkStep& step) {
  const StepPlugins plugins{&plugins_};
  for (uint32_t at = 0; at < tokens.size(); at += prefill_chunk_) {
    StepBatch batch;
    StepItem& item = batch.items.emplace_back();
    item.seq_id = seq;
    item.start = at;
    const uint32_t end = std::min<uint32_t>(uint32_t(tokens.size()), at + prefill_chunk_);
    item.tokens.assign(tokens.begin() + at, tokens.begin() + end);
    step(batch, [&] { return backend_->run_step(*weights_, batch, plugins); });
  }
}

GenerationStats Generator::generate(const std::vector<int32_t>& prompt, uint32_t max_new, int32_t eos,
                                    const Sampler& sample, const OnToken& on_token) {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty");
  const uint32_t context = weights_->spec.info.context_len;
  if (prompt.size() >= context)
    throw std::invalid_argument("the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
                                std::to_string(context));
  const uint64_t seq = next_seq_++;
  const StepPlugins plugins{&plugins_};
  const SequenceLease lease{*plugins_.get(slot_of(TH_KIND_KVCACHE)), seq};

  GenerationStats stats;
  stats.prompt_tokens = uint32_t(prompt.size());
  auto started = clock::now();
  std::vector<float> logits;
  prefill(seq, prompt, [&](StepBatch& batch, const RunStep& run) {
    StepItem& item = batch.items[0];
    item.sample = item.start + item.tokens.size() == prompt.size();
    auto out = run();
    if (item.sample) logits = std::move(out.at(0));
  });
  stats.prefill_seconds = std::chrono::duration<double>(clock::now() - started).count();
  started = clock::now();
  PluginSeconds decode_seconds;  // the plugins' time in the decode steps
  const StepPlugins decode_plugins{&plugins_, &decode_seconds};
  uint32_t position = uint32_t(prompt.size());
  stats.finish_reason = "length";
  while (stats.generated < max_new) {
    int32_t token = sample(logits);
    ++stats.generated;
    if (!on_token(token)) break;
    if (token == eos) {
      stats.finish_reason = "stop";
      break;
    }
    if (stats.generated == max_new) break;
    if (position + 1 >= context) {
      stats.finish_reason = "context";
      break;
    }
    StepItem item{seq, position++, {token}, true, nullptr};
    logits = std::move(backend_->run_step(*weights_, StepBatch{{item}}, decode_plugins).at(0));
  }
  stats.decode_seconds = std::chrono::duration<double>(clock::now() - started).count();
  stats.decode_attention_seconds = decode_seconds[slot_of(TH_KIND_ATTENTION)];
  return stats;
}

void Generator::score(const std::vector<int32_t>& tokens, uint32_t first, const OnRow& on_row) {
  if (tokens.empty()) throw std::invalid_argument("no tokens to score");
  const uint32_t context = weights_->spec.info.context_len;
  if (tokens.size() > context)
    throw std::invalid_argument(std::to_string(tokens.size()) + " tokens to score; the context holds " + std::to_string(context));
  if (first >= tokens.size())
    throw std::invalid_argument("scoring from position " + std::to_string(first) + " of " + std::to_string(tokens.size()) + " tokens");
  const uint64_t seq = next_seq_++;
  const SequenceLease lease{*plugins_.get(slot_of(TH_KIND_KVCACHE)), seq};
  prefill(seq, tokens, [&](StepBatch& batch, const RunStep& run) {
    StepItem& item = batch.items[0];
    const uint32_t at = item.start, end = at + uint32_t(item.tokens.size());
    item.logit_rows = end > first ? end - std::max(at, first) : 0;  // the chunk's last rows
    auto out = run();
    if (out.size() != item.logit_rows)
      throw std::runtime_error("the backend returned " + std::to_string(out.size()) + " rows of logits for " +
                               std::to_string(item.logit_rows));
    for (uint32_t r = 0; r < item.logit_rows; ++r) on_row(end - item.logit_rows + r, out[r]);
  });
}

std::vector<float> Generator::embed(const std::vector<int32_t>& tokens) {
  if (tokens.empty()) throw std::invalid_argument("the input is empty");
  const uint32_t context = weights_->spec.info.context_len, dim = weights_->spec.info.dim;
  if (tokens.size() > context)
    throw std::invalid_argument("the input has " + std::to_string(tokens.size()) + " tokens; the context holds " + std::to_string(context));
  const uint64_t seq = next_seq_++;
  const SequenceLease lease{*plugins_.get(slot_of(TH_KIND_KVCACHE)), seq};
  std::vector<double> sum(dim, 0.0);
  std::vector<float> hidden;
  prefill(seq, tokens, [&](StepBatch& batch, const RunStep& run) {
    StepItem& item = batch.items[0];
    item.sample = item.start + item.tokens.size() == tokens.size();  // one row's logits, unused: the step's shape stays the usual one
    batch.hidden = &hidden;
    run();
    for (size_t r = 0; r < item.tokens.size(); ++r)
      for (uint32_t d = 0; d < dim; ++d) sum[d] += hidden[r * dim + d];
  });
  double norm = 0;
  for (double& v : sum) {
    v /= double(tokens.size());
    norm += v * v;
  }
  norm = std::sqrt(norm);
  std::vector<float> out(dim);
  for (uint32_t d = 0; d < dim; ++d) out[d] = float(norm > 0 ? sum[d] / norm : 0.0);
  return out;
}

}  // namespace tokenhost
