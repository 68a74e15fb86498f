// Test helpers for kvcache plugins: a handle on one instance (vtable, layout, status-returning calls),
// the th_kvcache.h address formula, a plugin-independent model of block accounting with forks and
// copy-on-write, and a random reserve/fork/free driver that checks an instance against that model
// (and, optionally, the data written through the layout) after every operation.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "harness.hpp"
#include "metrics/metrics.hpp"
#include "model/quant.hpp"
#include "plugin/host_api.hpp"

namespace tokenhost::testing {

// The head vector (layer, block, position t within the block, kv head h) of base, by the layout
// formula of th_kvcache.h (float dtypes: element d is d elements of l.dtype further).
inline char* kv_vector(const th_kv_layout& l, void* base, uint32_t layer, int32_t block, uint32_t t, uint32_t h) {
  return static_cast<char*>(base) + int64_t(layer) * l.layer_stride + int64_t(block) * l.block_stride +
         int64_t(h) * l.head_stride + int64_t(t) * l.token_stride;
}

// n elements of l.dtype (f32 or f16) at slot, written from floats or read as floats.
inline void kv_store(const th_kv_layout& l, char* slot, const float* x, size_t n) {
  quant::quantize_row(l.dtype, x, slot, int64_t(n));
}
inline void kv_load(const th_kv_layout& l, const char* slot, float* x, size_t n) {
  quant::dequantize_row(l.dtype, slot, x, int64_t(n));
}

// x rounded to what the cache's element type holds (f16 rounding for an f16 cache), in place: values
// a test writes and expects back, or computes a reference from.
inline void round_to_kv(const th_kv_layout& l, std::vector<float>& x) {
  std::vector<char> bytes(x.size() * 4);
  kv_store(l, bytes.data(), x.data(), x.size());
  kv_load(l, bytes.data(), x.data(), x.size());
}

// The KV element types the kvcache and attention plugins are tested with.
inline const std::vector<th_dtype>& kv_dtypes() {
  static const std::vector<th_dtype> d = {TH_DTYPE_F32, TH_DTYPE_F16};
  return d;
}
inline ModelSpec with_kv_dtype(ModelSpec spec, th_dtype dtype) {
  spec.info.kv_dtype = dtype;
  return spec;
}

inline toml::table kv_config(uint32_t block_size, uint32_t n_blocks) {
  return toml::table{{"block_size", int64_t(block_size)}, {"n_blocks", int64_t(n_blocks)}};
}

// One kvcache instance made through the real loader.
struct KvCache {
  std::shared_ptr<PluginInstance> inst;
  const th_kvcache_vtable* vt = nullptr;
  const th_kv_layout* layout = nullptr;
  std::string last_error;  // message of the last failed call

  KvCache(const std::string& id, const ModelSpec& spec, uint32_t block_size, uint32_t n_blocks,
          metrics::Registry* registry = nullptr)
      : inst(make_plugin(id, spec, kv_config(block_size, n_blocks), registry)),
        vt(&inst->vtable<th_kvcache_vtable>()) {
    th_error err;
    REQUIRE(vt->get_layout(inst->handle(), &layout, &err) == TH_OK);
    REQUIRE(layout != nullptr);
    REQUIRE(layout->dtype == spec.info.kv_dtype);
    REQUIRE(layout->block_size == block_size);
    REQUIRE(layout->n_blocks == n_blocks);
  }

  th_status reserve(uint64_t seq, uint32_t n, uint32_t first_write) {
    th_error err;
    const th_status s = vt->seq_reserve(inst->handle(), seq, n, first_write, &err);
    last_error = err.text();
    return s;
  }
  th_status fork(uint64_t parent, uint64_t child) {
    th_error err;
    const th_status s = vt->seq_fork(inst->handle(), parent, child, &err);
    last_error = err.text();
    return s;
  }
  void free(uint64_t seq) { vt->seq_free(inst->handle(), seq); }
  th_status truncate(uint64_t seq, uint32_t n_positions) {
    th_error err;
    const th_status s = vt->seq_truncate(inst->handle(), seq, n_positions, &err);
    last_error = err.text();
    return s;
  }
  th_status drop(uint64_t seq, uint32_t first_block, uint32_t n_blocks) {
    REQUIRE(vt->seq_drop_blocks != nullptr);
    th_error err;
    const th_status s = vt->seq_drop_blocks(inst->handle(), seq, first_block, n_blocks, &err);
    last_error = err.text();
    return s;
  }
  th_status blocks(uint64_t seq, std::vector<int32_t>& out) {
    th_error err;
    const int32_t* b = nullptr;
    uint32_t n = 0;
    const th_status s = vt->seq_blocks(inst->handle(), seq, &b, &n, &err);
    last_error = err.text();
    out.assign(b, b + (s == TH_OK ? n : 0));
    return s;
  }
  std::vector<int32_t> table(uint64_t seq) {
    std::vector<int32_t> out;
    REQUIRE(blocks(seq, out) == TH_OK);
    return out;
  }
  th_kv_stats stats() const {
    th_kv_stats s{};
    vt->stats(inst->handle(), &s);
    return s;
  }
  // Key / value head vector of position p of a sequence with block table `table` (head_dim elements
  // of the layout's dtype).
  char* key(const std::vector<int32_t>& table, uint32_t layer, uint32_t p, uint32_t h) const {
    return kv_vector(*layout, layout->k_base, layer, table.at(p / layout->block_size), p % layout->block_size, h);
  }
  char* value(const std::vector<int32_t>& table, uint32_t layer, uint32_t p, uint32_t h) const {
    return kv_vector(*layout, layout->v_base, layer, table.at(p / layout->block_size), p % layout->block_size, h);
  }
  // Elements per position: K and V of every layer and kv head.
  size_t floats_per_position() const { return size_t(2) * layout->n_layers * layout->n_kv_heads * layout->head_dim; }
  // Writes (or reads) the elements of position p through the layout, order [K|V][layer][head][d].
  // write_position rounds data to the cache's element type first, so that read_position gives back
  // exactly what data then holds.
  void write_position(const std::vector<int32_t>& table, uint32_t p, std::vector<float>& data) const {
    round_to_kv(*layout, data);
    visit_position(table, p, [&](char* slot, size_t i) { kv_store(*layout, slot, &data[i], layout->head_dim); });
  }
  std::vector<float> read_position(const std::vector<int32_t>& table, uint32_t p) const {
    std::vector<float> out(floats_per_position());
    visit_position(table, p, [&](char* slot, size_t i) { kv_load(*layout, slot, &out[i], layout->head_dim); });
    return out;
  }

 private:
  // f(head vector, index of its first element in the position's order) for each head vector.
  template <class F>
  void visit_position(const std::vector<int32_t>& table, uint32_t p, F&& f) const {
    size_t i = 0;
    for (int kv = 0; kv < 2; ++kv) {
      for (uint32_t l = 0; l < layout->n_layers; ++l) {
        for (uint32_t h = 0; h < layout->n_kv_heads; ++h) {
          f(kv == 0 ? key(table, l, p, h) : value(table, l, p, h), i);
          i += layout->head_dim;
        }
      }
    }
  }
};

// What a kvcache must do, kept without block ids: each sequence's table holds abstract block ids
// (fresh ones on growth and on copy-on-write), each with a reference count.
struct KvModel {
  uint32_t block_size, total;
  std::map<uint64_t, std::vector<int>> tables;
  std::map<uint64_t, uint32_t> length;  // positions reserved so far (the largest n_positions)
  std::map<int, int> refs;              // abstract block -> sequences referencing it
  int next_block = 0;

  KvModel(uint32_t bs, uint32_t n) : block_size(bs), total(n) {}

  uint32_t used() const { return uint32_t(refs.size()); }
  uint32_t free_blocks() const { return total - used(); }
  uint32_t shared() const {
    return uint32_t(std::count_if(refs.begin(), refs.end(), [](const auto& r) { return r.second > 1; }));
  }
  bool has(uint64_t seq) const { return tables.count(seq) != 0; }

  // Indices of table entries reserve(seq, n, first_write) must copy: shared blocks holding a
  // position of [first_write, n).
  std::vector<size_t> copies(uint64_t seq, uint32_t n, uint32_t first_write) const {
    std::vector<size_t> out;
    const auto it = tables.find(seq);
    if (it == tables.end() || first_write >= n) return out;
    for (size_t j = 0; j < it->second.size(); ++j) {
      const uint64_t begin = uint64_t(j) * block_size, end = begin + block_size;
      if (begin < n && end > first_write && refs.at(it->second[j]) > 1) out.push_back(j);
    }
    return out;
  }
  size_t fresh_needed(uint64_t seq, uint32_t n, uint32_t first_write) const {
    const size_t want = (size_t(n) + block_size - 1) / block_size;
    const size_t have = has(seq) ? tables.at(seq).size() : 0;
    return copies(seq, n, first_write).size() + (want > have ? want - have : 0);
  }
  // false (and nothing changes) when the pool lacks the blocks.
  bool reserve(uint64_t seq, uint32_t n, uint32_t first_write) {
    if (fresh_needed(seq, n, first_write) > free_blocks()) return false;
    const std::vector<size_t> to_copy = copies(seq, n, first_write);
    std::vector<int>& t = tables[seq];
    for (size_t j : to_copy) {
      --refs[t[j]];
      t[j] = next_block++;
      refs[t[j]] = 1;
    }
    while (t.size() * block_size < n) {
      t.push_back(next_block++);
      refs[t.back()] = 1;
    }
    length[seq] = std::max(length[seq], n);
    return true;
  }
  th_status fork(uint64_t parent, uint64_t child) {
    if (!has(parent)) return TH_ERR_NOT_FOUND;
    if (has(child)) return TH_ERR_INVALID_ARGUMENT;
    tables[child] = tables[parent];
    length[child] = length[parent];
    for (int b : tables[child]) ++refs[b];
    return TH_OK;
  }
  void free(uint64_t seq) {
    if (!has(seq)) return;
    for (int b : tables[seq]) {
      if (--refs[b] == 0) refs.erase(b);
    }
    tables.erase(seq);
    length.erase(seq);
  }
};

// The instance agrees with the model: stats, table lengths, and one block id per abstract block
// (shared where the model shares, distinct where it does not), ids inside the pool.
inline void require_matches(KvCache& cache, const KvModel& model) {
  const th_kv_stats st = cache.stats();
  REQUIRE(st.total_blocks == model.total);
  REQUIRE(st.used_blocks + st.free_blocks == st.total_blocks);
  REQUIRE(st.used_blocks == model.used());
  REQUIRE(st.free_blocks == model.free_blocks());
  REQUIRE(st.shared_blocks == model.shared());
  REQUIRE(st.n_seqs == model.tables.size());
  std::map<int, int32_t> real_of;
  std::map<int32_t, int> abstract_of;
  for (const auto& [seq, t] : model.tables) {
    const std::vector<int32_t> real = cache.table(seq);
    REQUIRE(real.size() == t.size());
    for (size_t j = 0; j < t.size(); ++j) {
      REQUIRE(real[j] >= 0);
      REQUIRE(uint32_t(real[j]) < model.total);
      const auto [a, new_a] = real_of.emplace(t[j], real[j]);
      const auto [r, new_r] = abstract_of.emplace(real[j], t[j]);
      REQUIRE(a->second == real[j]);  // one abstract block is one real block
      REQUIRE(r->second == t[j]);     // one real block is one abstract block
    }
  }
}

// Runs n_ops random reserve / fork / free operations (some beyond the pool, some invalid forks) on
// cache and on a model, requiring after each that they agree; with check_data, writes fresh random
// values through the layout to the written positions [first_write, n) and requires every position of
// every sequence to read back, through its current block table, exactly what was last written to it
// (or inherited at a fork). With gauge, also requires the gauge to equal the used blocks.
inline void run_random_kv_ops(KvCache& cache, std::mt19937_64& rng, int n_ops, bool check_data,
                              const metrics::Family* gauge = nullptr,
                              const std::vector<std::string>& gauge_labels = {}) {
  const uint32_t bs = cache.layout->block_size, total = cache.layout->n_blocks;
  KvModel model(bs, total);
  std::map<uint64_t, std::vector<std::vector<float>>> content;  // seq -> position -> floats (empty: unwritten)
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  auto pick = [&](uint64_t n) { return uint64_t(std::uniform_int_distribution<uint64_t>(0, n - 1)(rng)); };
  auto any_seq = [&] {
    auto it = model.tables.begin();
    std::advance(it, pick(model.tables.size()));
    return it->first;
  };
  uint64_t next_id = 1, rewrite_next = 0;
  int exhausted = 0, forks = 0, cows = 0;
  for (int op = 0; op < n_ops; ++op) {
    uint64_t r = pick(100);
    if (model.free_blocks() * 3 < total && !model.tables.empty() && pick(2) == 0) r = 80;  // make room now and then
    const bool rewrite = model.has(rewrite_next);  // right after a fork: rewrite parent or child
    if (rewrite) r = 40;
    if (model.tables.empty() || r < 25 || (r >= 90 && r < 95)) {
      // A new sequence; r in [90, 95) asks for more than the whole pool.
      const uint64_t seq = next_id++;
      const uint32_t n = r >= 90 ? (total + 1) * bs : uint32_t(1 + pick(4 * bs));
      const bool fits = model.reserve(seq, n, 0);
      const th_status s = cache.reserve(seq, n, 0);
      INFO("op " << op << ": reserve new seq " << seq << " n " << n << ": " << cache.last_error);
      REQUIRE(s == (fits ? TH_OK : TH_ERR_RESOURCE_EXHAUSTED));
      exhausted += !fits;
      if (fits && check_data) {
        content[seq].resize(n);
        const std::vector<int32_t> t = cache.table(seq);
        for (uint32_t p = 0; p < n; ++p) {
          content[seq][p].resize(cache.floats_per_position());
          for (float& f : content[seq][p]) f = value(rng);
          cache.write_position(t, p, content[seq][p]);
        }
      }
    } else if (r < 55) {
      // Grow and/or rewrite an existing sequence (append, or rewrite from an earlier position).
      const uint64_t seq = rewrite ? rewrite_next : any_seq();
      rewrite_next = 0;
      const uint32_t len = model.length[seq];
      const uint32_t n = std::max<uint32_t>(1, uint32_t(len + pick(2 * bs + 1)) - (pick(4) == 0 ? uint32_t(pick(len)) : 0));
      const uint32_t fw = rewrite ? uint32_t(pick(std::min(len, n))) : pick(2) == 0 ? std::min(len, n) : uint32_t(pick(n + 1));
      const size_t n_copies = model.copies(seq, n, fw).size();
      const bool fits = model.reserve(seq, n, fw);
      const th_status s = cache.reserve(seq, n, fw);
      INFO("op " << op << ": reserve seq " << seq << " n " << n << " first_write " << fw << ": " << cache.last_error);
      REQUIRE(s == (fits ? TH_OK : TH_ERR_RESOURCE_EXHAUSTED));
      exhausted += !fits;
      cows += fits ? int(n_copies) : 0;
      if (fits && check_data) {
        auto& c = content[seq];
        if (c.size() < n) c.resize(n);
        const std::vector<int32_t> t = cache.table(seq);
        for (uint32_t p = fw; p < n; ++p) {
          c[p].resize(cache.floats_per_position());
          for (float& f : c[p]) f = value(rng);
          cache.write_position(t, p, c[p]);
        }
      }
    } else if (r < 75) {
      // Fork; now and then of an unknown parent or onto an existing child.
      uint64_t parent = any_seq(), child = next_id++;
      if (pick(10) == 0) parent = next_id++;
      else if (pick(10) == 0) child = any_seq();
      const th_status want = model.fork(parent, child);
      INFO("op " << op << ": fork " << parent << " -> " << child);
      REQUIRE(cache.fork(parent, child) == want);
      forks += want == TH_OK;
      if (want == TH_OK && pick(2) == 0) rewrite_next = pick(2) == 0 ? child : parent;
      if (want == TH_OK && check_data) content[child] = content[parent];
    } else {
      const uint64_t seq = pick(8) == 0 ? next_id + 1000 : any_seq();  // unknown ids are ignored
      model.free(seq);
      cache.free(seq);
      content.erase(seq);
    }
    require_matches(cache, model);
    if (gauge != nullptr) REQUIRE(gauge->value(gauge_labels) == double(model.used()));
    if (check_data) {
      for (const auto& [seq, positions] : content) {
        const std::vector<int32_t> t = cache.table(seq);
        for (uint32_t p = 0; p < positions.size(); ++p) {
          if (positions[p].empty()) continue;
          INFO("op " << op << ": seq " << seq << " position " << p);
          REQUIRE(cache.read_position(t, p) == positions[p]);
        }
      }
    }
  }
  std::printf("random kv ops (block_size %u, %u blocks): %d exhausted, %d forks, %d copy-on-write copies\n", bs,
              total, exhausted, forks, cows);
  // The run exercised what it claims to.
  INFO("exhausted " << exhausted << ", forks " << forks << ", copy-on-write copies " << cows);
  CHECK(exhausted > 0);
  CHECK(forks > 0);
  CHECK(cows > 0);
}

}  // namespace tokenhost::testing
