#include "actors/kv_connectors.hpp"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <tokenhost/plugin_kv_blocks.hpp>

#include "plugin/host_api.hpp"
#include "plugin/kind.hpp"
#include "plugin/plugin_fault.hpp"
#include "runtime/prefix_summary.hpp"
#include "util/steady_clock.hpp"

namespace tokenhost {
namespace {

// FNV-1a, continued over bytes.
uint64_t fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}
template <class T>
uint64_t fnv_value(uint64_t h, T v) {
  return fnv(h, &v, sizeof v);
}

// A matrix's first and last rows (up to 4 KiB each): enough to tell two trainings apart.
uint64_t sample(uint64_t h, const WeightView& w) {
  if (w.empty() || w.rows == 0) return fnv_value(h, 0);
  h = fnv_value(h, int64_t(w.type));
  h = fnv_value(h, w.rows);
  h = fnv_value(h, w.cols);
  const size_t bytes = std::min<size_t>(w.row_bytes * size_t(w.rows), 4096);
  h = fnv(h, w.data, bytes);
  const auto* end = static_cast<const unsigned char*>(w.data) + w.row_bytes * size_t(w.rows);
  return fnv(h, end - bytes, bytes);
}

SlotId connector_slot() { return slot_of(TH_KIND_KV_CONNECTOR); }

// The kvcache's layout when it has whole blocks to move (plugin/instance.hpp's kv_layout), else NULL.
const th_kv_layout* layout_of(const PluginInstance& kv) {
  const th_kv_layout* layout = kv_layout(kv);
  return layout != nullptr && layout->block_size > 0 ? layout : nullptr;
}

// seq_id's block table, or empty when the kvcache will not give it.
std::vector<int32_t> block_table(PluginInstance& kv, uint64_t seq_id) {
  const int32_t* blocks = nullptr;
  uint32_t n = 0;
  th_error err;
  if (kv.call(&th_kvcache_vtable::seq_blocks, "seq_blocks", kv.handle(), seq_id, &blocks, &n, &err) != TH_OK || blocks == nullptr)
    return {};
  return std::vector<int32_t>(blocks, blocks + n);
}

bool blocks_valid(const std::vector<int32_t>& table, size_t first, size_t n, const th_kv_layout& layout) {
  if (table.size() < first + n) return false;
  return std::all_of(table.begin() + long(first), table.begin() + long(first + n),
                     [&](int32_t b) { return b >= 0 && uint32_t(b) < layout.n_blocks; });
}

}  // namespace

uint64_t model_identity(const ModelWeights& w) {
  uint64_t h = 14695981039346656037ull;
  h = fnv(h, w.spec.architecture.data(), w.spec.architecture.size());
  const th_model_info& i = w.spec.info;
  for (uint32_t v : {i.n_layers, i.dim, i.n_heads, i.n_kv_heads, i.head_dim, i.ffn_dim, i.vocab_size, i.n_experts}) h = fnv_value(h, v);
  h = sample(h, w.embed);
  h = sample(h, w.out_norm);
  h = sample(h, w.output);
  for (const auto& l : w.layers) {
    for (const WeightView* v : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo}) h = sample(h, *v);
    if (!l.experts.empty()) h = sample(sample(h, l.experts.front().gate), l.experts.front().down);
  }
  return h;
}

KvConnectors::KvConnectors(std::string engine, uint64_t model_identity, metrics::Registry* metrics)
    : engine_(std::move(engine)), model_identity_(model_identity), metrics_(metrics) {}

bool KvConnectors::active(const SlotInstances& plugins) const {
  if (plugins.stack(connector_slot()).empty()) return false;
  const PluginInstance* kv = plugins.get(slot_of(TH_KIND_KVCACHE));
  return kv != nullptr && caches_prefixes(*kv) && kv->fn(&th_kvcache_vtable::seq_truncate) != nullptr;
}

uint64_t KvConnectors::namespace_of(uint64_t cache_ns, const th_kv_layout& layout) const {
  uint64_t h = fnv_value(14695981039346656037ull, model_identity_);
  h = fnv_value(h, sdk::kv_shape_fingerprint(sdk::kv_block_shape(layout)));
  return fnv_value(h, cache_ns);
}

KvConnectors::Counts& KvConnectors::counts(size_t layer) {
  if (counts_.size() <= layer) counts_.resize(layer + 1);
  return counts_[layer];
}

void KvConnectors::count_metrics(size_t layer, const PluginInstance& p, const char* what, double value) {
  if (metrics_ == nullptr || value == 0) return;
  static const std::map<std::string, std::pair<const char*, const char*>> families = {
      {"saved_blocks", {"tokenhost_kv_connector_saved_blocks_total", "KV blocks a connector stored"}},
      {"saved_bytes", {"tokenhost_kv_connector_saved_bytes_total", "Bytes of the KV blocks a connector stored"}},
      {"loaded_blocks", {"tokenhost_kv_connector_loaded_blocks_total", "KV blocks a connector loaded into the pool"}},
      {"loaded_bytes", {"tokenhost_kv_connector_loaded_bytes_total", "Bytes of the KV blocks a connector loaded"}},
      {"hits", {"tokenhost_kv_connector_hits_total", "Prompts whose blocks a connector tier held (loads started)"}},
      {"load_failures", {"tokenhost_kv_connector_load_failures_total", "Loads that failed or stopped short (recomputed)"}},
      {"load_seconds", {"tokenhost_kv_connector_load_seconds_total", "Time from a load's start to its completion"}},
  };
  const auto& [name, help] = families.at(what);
  metrics_->family(metrics::Type::counter, name, help, {"engine", "tier", "connector"})
      .add({engine_, std::to_string(layer), p.id()}, value);
}

uint32_t KvConnectors::start_load(const SlotInstances& plugins, PluginInstance& kv, uint64_t seq_id, uint64_t cache_ns,
                                  const std::vector<int32_t>& prompt, uint32_t n_cached) {
  if (!active(plugins)) return 0;
  const th_kv_layout* layout = layout_of(kv);
  if (layout == nullptr) return 0;
  const uint32_t bs = layout->block_size;
  Seq& seq = seqs_[seq_id];
  seq.cache_ns = cache_ns;
  seq.prompt = prompt;
  seq.keys.clear();
  seq.saved_blocks = n_cached / bs;
  // Whole blocks only, and never the last prompt token (its logits give the first token).
  if (prompt.size() < 2 || n_cached % bs != 0) return 0;
  const uint32_t first = n_cached / bs, last = uint32_t(prompt.size() - 1) / bs;
  if (first >= last) return 0;
  std::vector<uint64_t>& keys = seq.keys;
  extend_prefix_block_keys(cache_ns, prompt, last * bs, bs, keys);
  const uint64_t ns = namespace_of(cache_ns, *layout);
  const auto& stack = plugins.stack(connector_slot());
  size_t best = 0;
  uint32_t best_n = 0;
  for (size_t i = 0; i < stack.size(); ++i) {
    uint32_t n = 0;
    th_error err;
    PluginInstance& c = *stack[i];
    if (th_status st = c.call(&th_kv_connector_vtable::contains, "contains", c.handle(), ns, keys.data() + first, last - first, &n, &err)) {
      spdlog::warn("engine {}: kv_connector #{} {} contains failed with {}: {}", engine_, i, c.id(), status_name(st), err.text());
      continue;
    }
    n = std::min(n, last - first);  // a count past the keys asked is not trusted beyond them
    if (n > best_n) best = i, best_n = n;
  }
  if (best_n == 0) return 0;
  th_error err;
  const uint32_t end = (first + best_n) * bs;
  if (kv.call(&th_kvcache_vtable::seq_reserve, "seq_reserve", kv.handle(), seq_id, end, n_cached, &err) != TH_OK) return 0;
  const std::vector<int32_t> table = block_table(kv, seq_id);
  PluginInstance& c = *stack[best];
  auto give_back = [&] {
    th_error e;
    kv.call(&th_kvcache_vtable::seq_truncate, "seq_truncate", kv.handle(), seq_id, n_cached, &e);
  };
  if (!blocks_valid(table, first, best_n, *layout)) {
    spdlog::warn("engine {}: {} gave sequence {} no valid table of {} blocks to load into", engine_, kv.id(), seq_id, first + best_n);
    give_back();
    return 0;
  }
  const uint64_t ticket = next_ticket_++;
  th_kv_transfer t{sizeof(th_kv_transfer), ticket, ns, keys.data() + first, table.data() + first, best_n, layout, nullptr};
  th_status st = TH_OK;
  try {
    st = c.call(&th_kv_connector_vtable::load, "load", c.handle(), &t, &err);
  } catch (const PluginFault&) {
    give_back();  // nothing of the load stands; the fault stops the engine (LookupResult::fault)
    throw;
  }
  if (st != TH_OK) {
    spdlog::warn("engine {}: kv_connector #{} {} refused a load of {} blocks ({}): {}", engine_, best, c.id(), best_n, status_name(st),
                 err.text());
    give_back();
    return 0;
  }
  loads_[ticket] = Load{seq_id, best, n_cached, best_n, steady_now_ns(), false};
  ++counts(best).hits;
  count_metrics(best, c, "hits", 1);
  return best_n * bs;
}

void KvConnectors::relooked(uint64_t seq_id, uint32_t n_cached, uint32_t block_size) {
  // The blocks a relookup found are the prefix cache's: whoever computed them saved them.
  if (auto it = seqs_.find(seq_id); it != seqs_.end() && block_size > 0)
    it->second.saved_blocks = std::max(it->second.saved_blocks, n_cached / block_size);
}

void KvConnectors::save_step(const SlotInstances& plugins, PluginInstance& kv, const StepBatch& batch) {
  if (seqs_.empty() || !active(plugins)) return;
  const th_kv_layout* layout = layout_of(kv);
  if (layout == nullptr) return;
  const uint32_t bs = layout->block_size;
  const auto& stack = plugins.stack(connector_slot());
  for (const auto& item : batch.items) {
    auto it = seqs_.find(item.seq_id);
    if (it == seqs_.end()) continue;
    Seq& seq = it->second;
    // Positions final after this step: the item's own tokens (drafts only ever follow the prompt).
    const uint32_t end = std::min<uint32_t>(item.start + uint32_t(item.tokens.size() - item.n_draft), uint32_t(seq.prompt.size()));
    const uint32_t done = end / bs;
    if (done <= seq.saved_blocks) continue;
    const uint32_t from = seq.saved_blocks;
    seq.saved_blocks = done;
    std::vector<uint64_t>& keys = seq.keys;  // only the blocks this step completed are hashed
    extend_prefix_block_keys(seq.cache_ns, seq.prompt, done * bs, bs, keys);
    const std::vector<int32_t> table = block_table(kv, item.seq_id);
    if (!blocks_valid(table, from, done - from, *layout)) continue;
    const uint64_t ns = namespace_of(seq.cache_ns, *layout);
    for (size_t i = 0; i < stack.size(); ++i) {
      PluginInstance& c = *stack[i];
      const uint64_t ticket = next_ticket_++;
      th_kv_transfer t{sizeof(th_kv_transfer), ticket, ns, keys.data() + from, table.data() + from, done - from, layout, nullptr};
      th_error err;
      if (th_status st = c.call(&th_kv_connector_vtable::save, "save", c.handle(), &t, &err)) {
        if (counts(i).saves_refused++ % 100 == 0)
          spdlog::warn("engine {}: kv_connector #{} {} refused to save {} blocks ({} such): {}: {}", engine_, i, c.id(), done - from,
                       counts(i).saves_refused, status_name(st), err.text());
        continue;
      }
      saves_[ticket] = Save{item.seq_id, i, done - from, steady_now_ns()};
    }
  }
}

std::vector<KvLoadDone> KvConnectors::poll(const SlotInstances& plugins, PluginInstance& kv) {
  std::vector<KvLoadDone> done;
  const auto& stack = plugins.stack(connector_slot());
  if (stack.empty() || (loads_.empty() && saves_.empty())) return done;
  const th_kv_layout* layout = layout_of(kv);
  const size_t image = layout != nullptr ? sdk::kv_block_image_bytes(sdk::kv_block_shape(*layout)) : 0;
  const uint64_t now = steady_now_ns();
  th_kv_completion out[64];
  for (size_t i = 0; i < stack.size(); ++i) {
    PluginInstance& c = *stack[i];
    for (;;) {
      uint32_t n = 0;
      c.call(&th_kv_connector_vtable::poll, "poll", c.handle(), out, uint32_t(std::size(out)), &n);
      n = std::min<uint32_t>(n, uint32_t(std::size(out)));
      for (uint32_t k = 0; k < n; ++k) {
        const th_kv_completion& cp = out[k];
        const std::string why = cp.status != TH_OK && cp.message != nullptr ? cp.message : "";
        if (auto s = saves_.find(cp.ticket); s != saves_.end() && s->second.layer == i) {
          const uint32_t stored = std::min(cp.n_done, s->second.n_blocks);
          Counts& cnt = counts(i);
          cnt.saved_blocks += stored;
          cnt.saved_bytes += stored * image;
          cnt.save_seconds += double(now - s->second.started_ns) * 1e-9;
          count_metrics(i, c, "saved_blocks", stored);
          count_metrics(i, c, "saved_bytes", double(stored * image));
          if (cp.status != TH_OK) {
            ++cnt.save_failures;
            cnt.last_failure = c.id() + " stored " + std::to_string(stored) + " of " + std::to_string(s->second.n_blocks) +
                               " blocks (" + status_name(cp.status) + (why.empty() ? "" : ": " + why) + ")";
            if (cnt.save_failures % 100 == 1)
              spdlog::warn("engine {}: kv_connector #{}: {} ({} such saves)", engine_, i, cnt.last_failure, cnt.save_failures);
          }
          saves_.erase(s);
          continue;
        }
        auto l = loads_.find(cp.ticket);
        if (l == loads_.end() || l->second.layer != i) {
          spdlog::warn("engine {}: kv_connector #{} {} reported ticket {}, which it was never given (ignored)", engine_, i, c.id(), cp.ticket);
          continue;
        }
        const Load load = l->second;
        loads_.erase(l);
        const double seconds = double(now - load.started_ns) * 1e-9;
        if (load.released) {  // the engine let the sequence go: its blocks are free to give back now
          kv.call(&th_kvcache_vtable::seq_free, "seq_free", kv.handle(), load.seq_id);
          seqs_.erase(load.seq_id);
          continue;
        }
        const uint32_t ok = cp.status == TH_OK ? load.n_blocks : std::min(cp.n_done, load.n_blocks);
        const uint32_t bs = layout != nullptr ? layout->block_size : 0;
        KvLoadDone d{load.seq_id, load.first_position + ok * bs, ""};
        Counts& cnt = counts(i);
        cnt.loaded_blocks += ok;
        cnt.loaded_bytes += ok * image;
        cnt.load_seconds += seconds;
        count_metrics(i, c, "loaded_blocks", ok);
        count_metrics(i, c, "loaded_bytes", double(ok * image));
        count_metrics(i, c, "load_seconds", seconds);
        if (ok < load.n_blocks) {
          ++cnt.load_failures;
          count_metrics(i, c, "load_failures", 1);
          d.error = c.id() + " loaded " + std::to_string(ok) + " of " + std::to_string(load.n_blocks) + " blocks (" +
                    status_name(cp.status) + (why.empty() ? "" : ": " + why) + "); the rest is computed";
          spdlog::warn("engine {}: sequence {}: {}", engine_, load.seq_id, d.error);
          cnt.last_failure = d.error;
          th_error err;
          kv.call(&th_kvcache_vtable::seq_truncate, "seq_truncate", kv.handle(), load.seq_id, d.positions, &err);
        }
        auto seq = seqs_.find(load.seq_id);
        if (ok > 0 && seq != seqs_.end()) {
          // The loaded positions join the prefix cache (contiguous after the lookup's, th_kvcache.h).
          const auto& p = seq->second.prompt;
          th_error err;
          if (th_status st = kv.call(&th_kvcache_vtable::seq_publish, "seq_publish", kv.handle(), load.seq_id, load.first_position,
                                     p.data() + load.first_position, ok * bs, &err))
            spdlog::warn("engine {}: {} seq_publish of loaded blocks of sequence {} failed with {}: {}", engine_, kv.id(), load.seq_id,
                         status_name(st), err.text());
          seq->second.saved_blocks = std::max(seq->second.saved_blocks, d.positions / bs);  // the tiers have them
        }
        done.push_back(std::move(d));
      }
      if (n < std::size(out)) break;
    }
  }
  return done;
}

bool KvConnectors::release(const SlotInstances& plugins, uint64_t seq_id) {
  for (auto& [ticket, load] : loads_) {
    if (load.seq_id != seq_id || load.released) continue;
    load.released = true;
    const auto& stack = plugins.stack(connector_slot());
    if (load.layer < stack.size()) {
      PluginInstance& c = *stack[load.layer];
      c.call(&th_kv_connector_vtable::cancel, "cancel", c.handle(), ticket);
    }
    return false;
  }
  seqs_.erase(seq_id);
  return true;
}

std::vector<uint64_t> KvConnectors::saving() const {
  std::vector<uint64_t> out;
  for (const auto& [ticket, save] : saves_)
    if (std::find(out.begin(), out.end(), save.seq_id) == out.end()) out.push_back(save.seq_id);
  return out;
}

size_t KvConnectors::loads_on(size_t layer) const {
  return size_t(std::count_if(loads_.begin(), loads_.end(), [&](const auto& l) { return l.second.layer == layer; }));
}

void KvConnectors::layer_changed(int delta, size_t layer) {
  for (auto it = saves_.begin(); it != saves_.end();) {
    if (it->second.layer == layer && delta <= 0) it = saves_.erase(it);  // its instance went
    else {
      if (it->second.layer >= layer + (delta < 0 ? 1 : 0)) it->second.layer = size_t(int64_t(it->second.layer) + delta);
      ++it;
    }
  }
  for (auto& [ticket, load] : loads_)  // none is on a replaced or removed layer (the worker checks)
    if (load.layer >= layer + (delta < 0 ? 1 : 0)) load.layer = size_t(int64_t(load.layer) + delta);
  if (counts_.size() < layer) counts_.resize(layer);
  if (delta > 0) counts_.insert(counts_.begin() + long(layer), Counts{});
  else if (delta < 0 && layer < counts_.size()) counts_.erase(counts_.begin() + long(layer));
  else if (delta == 0 && layer < counts_.size()) counts_[layer] = Counts{};
}

nlohmann::json KvConnectors::status(const SlotInstances& plugins) const {
  nlohmann::json layers = nlohmann::json::array();
  const auto& stack = plugins.stack(connector_slot());
  for (size_t i = 0; i < stack.size(); ++i) {
    const PluginInstance& c = *stack[i];
    th_kv_connector_stats st{};
    st.struct_size = sizeof st;
    c.call(&th_kv_connector_vtable::stats, "stats", c.handle(), &st);
    const Counts cnt = i < counts_.size() ? counts_[i] : Counts{};
    layers.push_back({{"tier", i},
                      {"id", c.id()},
                      {"version", c.version()},
                      {"stored_blocks", st.stored_blocks},
                      {"stored_bytes", st.stored_bytes},
                      {"capacity_bytes", st.capacity_bytes},
                      {"evicted_blocks", st.evicted_blocks},
                      {"refused_blocks", st.refused_blocks},
                      {"saved_blocks", cnt.saved_blocks},
                      {"saved_bytes", cnt.saved_bytes},
                      {"loaded_blocks", cnt.loaded_blocks},
                      {"loaded_bytes", cnt.loaded_bytes},
                      {"hits", cnt.hits},
                      {"load_failures", cnt.load_failures},
                      {"save_failures", cnt.save_failures + cnt.saves_refused},
                      {"load_seconds", cnt.load_seconds},
                      {"save_seconds", cnt.save_seconds},
                      {"last_failure", cnt.last_failure}});
  }
  return {{"layers", layers}, {"loading", loads_.size()}, {"saving", saves_.size()}};
}

}  // namespace tokenhost
