// kvcache rules: the layout fits the model, accounting is exact over random operations, forks copy on
// write, truncation (ABI 1.4) gives back only what lies past the cut, a reservation that cannot fit
// changes nothing, freeing returns every block, prefix caching (ABI 1.5) serves published bytes
// under the same salt only, refuses a publish with a gap, and gives cached blocks back to the pool, and
// a sliding window's seq_drop_blocks (ABI 1.6) moves the later blocks down, copying shared ones.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "conformance/conformance.hpp"

namespace tokenhost::conformance {
namespace {

struct Cache {
  PluginInstance& inst;
  const th_kv_layout* layout = nullptr;
  std::map<uint64_t, uint32_t> lengths;  // the sequences alive and the positions each reserved

  th_kv_stats stats() {
    th_kv_stats s{};
    s.struct_size = sizeof s;
    inst.call(&th_kvcache_vtable::stats, "stats", inst.handle(), &s);
    return s;
  }
  std::vector<int32_t> table(uint64_t seq) {
    const int32_t* blocks = nullptr;
    uint32_t n = 0;
    th_error err;
    th_status st = inst.call(&th_kvcache_vtable::seq_blocks, "seq_blocks", inst.handle(), seq, &blocks, &n, &err);
    expect(st == TH_OK, "seq_blocks(" + std::to_string(seq) + ") returned " + std::to_string(st) + ": " + err.text());
    expect(n == 0 || blocks != nullptr, "seq_blocks gave a NULL table of " + std::to_string(n) + " blocks");
    return std::vector<int32_t>(blocks, blocks + n);
  }
  th_status reserve(uint64_t seq, uint32_t n, uint32_t first_write) {
    th_error err;
    th_status st = inst.call(&th_kvcache_vtable::seq_reserve, "seq_reserve", inst.handle(), seq, n, first_write, &err);
    if (st == TH_OK) lengths[seq] = std::max(lengths[seq], n);
    return st;
  }
  // seq_truncate (ABI 1.4, optional): NULL when the plugin has none.
  bool can_truncate() const { return inst.fn(&th_kvcache_vtable::seq_truncate) != nullptr; }
  th_status truncate(uint64_t seq, uint32_t n) {
    th_error err;
    th_status st = inst.call(&th_kvcache_vtable::seq_truncate, "seq_truncate", inst.handle(), seq, n, &err);
    if (st == TH_OK && lengths.count(seq)) lengths[seq] = std::min(lengths[seq], n);
    return st;
  }
  void free(uint64_t seq) {
    inst.call(&th_kvcache_vtable::seq_free, "seq_free", inst.handle(), seq);
    lengths.erase(seq);
  }
  // Every accounting fact, derived from the block tables, against stats().
  void check_accounting(const std::string& after) {
    const th_kv_stats s = stats();
    std::map<int32_t, uint32_t> refs;
    for (const auto& [seq, n] : lengths) {
      const auto t = table(seq);
      const uint32_t want = (n + layout->block_size - 1) / layout->block_size;
      expect(t.size() == want, after + ": sequence " + std::to_string(seq) + " holds " + std::to_string(n) +
                                   " positions in " + std::to_string(t.size()) + " blocks, not " + std::to_string(want));
      for (int32_t b : t) {
        expect(b >= 0 && uint32_t(b) < layout->n_blocks, after + ": block index " + std::to_string(b) + " is outside the pool");
        ++refs[b];
      }
    }
    uint32_t shared = 0;
    for (const auto& [b, n] : refs) shared += n > 1;
    auto text = [](uint32_t a) { return std::to_string(a); };
    // ABI 1.5: cached blocks (held by no sequence) complete the sum; held counts each holder.
    const uint32_t cached = TH_HAS_MEMBER(&s, th_kv_stats, cached_blocks) ? s.cached_blocks : 0;
    expect(s.used_blocks + s.free_blocks + cached == s.total_blocks,
           after + ": used " + text(s.used_blocks) + " + free " + text(s.free_blocks) + " + cached " + text(cached) + " != total " +
               text(s.total_blocks) +
               (s.used_blocks + s.free_blocks + cached < s.total_blocks
                    ? std::string(" (blocks no sequence holds but the pool keeps, as retain() does for a prefix cache, count as "
                                  "th_kv_stats.cached_blocks") +
                          (TH_HAS_MEMBER(&s, th_kv_stats, cached_blocks) ? ")" : ", which this plugin's ABI minor predates: it may keep none)")
                    : std::string()));
    if (TH_HAS_MEMBER(&s, th_kv_stats, held_blocks)) {
      uint32_t held = 0;
      for (const auto& [b, n] : refs) held += n;
      expect(s.held_blocks == held, after + ": stats say the sequences hold " + text(s.held_blocks) + " blocks, their tables " + text(held));
    }
    expect(s.used_blocks == refs.size(), after + ": stats say " + text(s.used_blocks) + " blocks used, the tables hold " +
                                             text(uint32_t(refs.size())));
    expect(s.shared_blocks == shared, after + ": stats say " + text(s.shared_blocks) + " shared blocks, the tables share " + text(shared));
    expect(s.n_seqs == lengths.size(), after + ": stats say " + text(s.n_seqs) + " sequences, " +
                                           text(uint32_t(lengths.size())) + " are alive");
  }
  // The bytes of one position's keys and values, every layer and head (for copy-on-write checks).
  std::string position_bytes(int32_t block, uint32_t t) {
    std::string out;
    const size_t vector = size_t(layout->head_dim) * (layout->dtype == TH_DTYPE_F16 ? 2 : 4);
    for (const void* base : {layout->k_base, layout->v_base})
      for (uint32_t l = 0; l < layout->n_layers; ++l)
        for (uint32_t h = 0; h < layout->n_kv_heads; ++h)
          out.append(static_cast<const char*>(base) + int64_t(l) * layout->layer_stride + int64_t(block) * layout->block_stride +
                         int64_t(h) * layout->head_stride + int64_t(t) * layout->token_stride,
                     vector);
    return out;
  }
  void write_position(int32_t block, uint32_t t, Rng& rng) {
    const size_t vector = size_t(layout->head_dim) * (layout->dtype == TH_DTYPE_F16 ? 2 : 4);
    for (void* base : {layout->k_base, layout->v_base})
      for (uint32_t l = 0; l < layout->n_layers; ++l)
        for (uint32_t h = 0; h < layout->n_kv_heads; ++h) {
          char* at = static_cast<char*>(base) + int64_t(l) * layout->layer_stride + int64_t(block) * layout->block_stride +
                     int64_t(h) * layout->head_stride + int64_t(t) * layout->token_stride;
          for (size_t i = 0; i < vector; ++i) at[i] = char(uniform(rng, 0, 255));
        }
  }
};

}  // namespace

void kvcache_rules(PluginCatalog& catalog, const PluginManifest& plugin, Rng& rng, const Options& o, Report& r) {
  const ModelSpec model = model_shape(4, 2, 16, TH_DTYPE_F16);
  std::string why;
  auto inst = instance_for(catalog, plugin, model, why);
  if (!inst) {
    for (const char* rule : {"kvcache.layout_fits_model", "kvcache.accounting", "kvcache.copy_on_write", "kvcache.truncate",
                             "kvcache.exhaustion_changes_nothing", "kvcache.free_returns_blocks", "kvcache.prefix_cache",
                             "kvcache.drop_blocks"})
      r.not_applicable(rule, "check() refuses an f16 cache of a 2-layer, 2 kv-head model: " + why);
    return;
  }
  Cache c{*inst, nullptr, {}};
  r.rule("kvcache.layout_fits_model", [&] {
    th_error err;
    th_status st = inst->call(&th_kvcache_vtable::get_layout, "get_layout", inst->handle(), &c.layout, &err);
    expect(st == TH_OK && c.layout != nullptr, "get_layout() returned " + std::to_string(st) + ": " + err.text());
    const th_kv_layout& l = *c.layout;
    expect(l.n_layers == model.info.n_layers && l.n_kv_heads == model.info.n_kv_heads && l.head_dim == model.info.head_dim,
           "the layout's layers/kv heads/head size (" + std::to_string(l.n_layers) + "/" + std::to_string(l.n_kv_heads) + "/" +
               std::to_string(l.head_dim) + ") differ from the model's (2/2/16)");
    expect(l.dtype == model.info.kv_dtype, "the layout's dtype " + std::to_string(l.dtype) + " is not the model's kv dtype (f16)");
    expect(l.block_size > 0 && l.n_blocks > 0 && l.k_base != nullptr && l.v_base != nullptr,
           "the layout has no blocks, a block size of 0 or NULL pools");
    expect(l.n_blocks == c.stats().total_blocks, "the layout's n_blocks differs from stats().total_blocks");
    // ABI 1.2: where the pools live, read only when the plugin's layout has the member. The runner's
    // instance was made for the CPU, so its pools must be host memory.
    if (TH_HAS_MEMBER(&l, th_kv_layout, device))
      expect(l.device == TH_DEVICE_CPU && l.device_index == 0,
             "the layout says its pools lie on device kind " + std::to_string(l.device) + " index " +
                 std::to_string(l.device_index) + ", but the instance was made for the CPU");
  });
  if (c.layout == nullptr) return;
  const uint32_t bs = c.layout->block_size;
  const uint32_t total = c.stats().total_blocks;
  uint64_t next_seq = 1;
  r.rule("kvcache.accounting", [&] {
    for (uint32_t op = 0; op < 20 * o.rounds; ++op) {
      const uint32_t what = uniform(rng, 0, 9);  // 9: a truncation when the plugin has it, else a free
      if (c.lengths.empty() || what < 4) {  // a new sequence
        const uint32_t n = uniform(rng, 1, std::max(1u, std::min(total * bs / 8, 4 * bs)));
        const th_status st = c.reserve(next_seq, n, 0);
        expect(st == TH_OK || st == TH_ERR_RESOURCE_EXHAUSTED, "seq_reserve of a new sequence returned " + std::to_string(st));
        if (st == TH_OK) c.check_accounting("after reserving " + std::to_string(n) + " positions of a new sequence");
        ++next_seq;
      } else {
        auto it = c.lengths.begin();
        std::advance(it, uniform(rng, 0, uint32_t(c.lengths.size() - 1)));
        const uint64_t seq = it->first;
        const uint32_t n = it->second;
        if (what < 6) {  // grow it, writing its new positions
          const th_status st = c.reserve(seq, n + uniform(rng, 1, 2 * bs), n);
          expect(st == TH_OK || st == TH_ERR_RESOURCE_EXHAUSTED, "seq_reserve returned " + std::to_string(st));
          c.check_accounting("after growing sequence " + std::to_string(seq));
        } else if (what == 9 && c.can_truncate()) {  // roll it back (ABI 1.4), to any length
          const uint32_t keep = uniform(rng, 0, n);
          const th_status st = c.truncate(seq, keep);
          expect(st == TH_OK, "seq_truncate(" + std::to_string(seq) + ", " + std::to_string(keep) + ") returned " + std::to_string(st));
          c.check_accounting("after truncating sequence " + std::to_string(seq) + " from " + std::to_string(n) + " to " +
                             std::to_string(keep) + " positions");
        } else if (what < 8) {  // fork it
          th_error err;
          const th_status st = inst->call(&th_kvcache_vtable::seq_fork, "seq_fork", inst->handle(), seq, next_seq, &err);
          expect(st == TH_OK, "seq_fork returned " + std::to_string(st) + ": " + err.text());
          c.lengths[next_seq++] = n;
          c.check_accounting("after forking sequence " + std::to_string(seq));
        } else {
          c.free(seq);
          c.check_accounting("after freeing sequence " + std::to_string(seq));
        }
      }
    }
  });
  r.rule("kvcache.copy_on_write", [&] {
    while (!c.lengths.empty()) c.free(c.lengths.begin()->first);  // room for every round
    uint32_t checked = 0;
    for (uint32_t round = 0; round < o.rounds; ++round) {
      const uint64_t parent = next_seq++, child = next_seq++;
      const uint32_t n = uniform(rng, 1, 3 * bs);
      if (c.reserve(parent, n, 0) != TH_OK) continue;  // no room left by the accounting rule's sequences
      const auto parent_table = c.table(parent);
      for (uint32_t p = 0; p < n; ++p) c.write_position(parent_table[p / bs], p % bs, rng);
      th_error err;
      expect(inst->call(&th_kvcache_vtable::seq_fork, "seq_fork", inst->handle(), parent, child, &err) == TH_OK,
             "seq_fork failed: " + err.text());
      c.lengths[child] = n;
      expect(c.table(child) == parent_table, "a forked sequence does not share its parent's blocks");
      // The child writes from a position inside the last (shared) block on.
      const uint32_t first_write = n - 1 - uniform(rng, 0, (n - 1) % bs);
      if (c.reserve(child, n + 1, first_write) != TH_OK) continue;
      const auto child_table = c.table(child);
      expect(c.table(parent) == parent_table, "the child's write changed the parent's block table");
      const uint32_t j = first_write / bs;
      expect(child_table[j] != parent_table[j], "block " + std::to_string(j) + ", shared with the parent, was not copied "
                                                "before the child's write at position " + std::to_string(first_write));
      for (uint32_t t = j * bs; t < first_write; ++t)
        expect(c.position_bytes(child_table[j], t % bs) == c.position_bytes(parent_table[j], t % bs),
               "the copy of block " + std::to_string(j) + " lost position " + std::to_string(t) + "'s keys or values");
      c.check_accounting("after a copy-on-write");
      c.free(parent);
      c.free(child);
      ++checked;
    }
    expect(checked > 0, "no fork could be reserved: the pool has no room for two short sequences");
  });
  if (!c.can_truncate()) {
    r.not_applicable("kvcache.truncate", "the plugin has no seq_truncate (optional, ABI 1.4): its engines run without "
                                         "speculative decoding");
  } else {
    r.rule("kvcache.truncate", [&] {
      while (!c.lengths.empty()) c.free(c.lengths.begin()->first);
      th_error err;
      expect(c.truncate(next_seq++, 0) == TH_ERR_NOT_FOUND, "seq_truncate of an unknown sequence did not return TH_ERR_NOT_FOUND");
      for (uint32_t round = 0; round < o.rounds; ++round) {
        // A sequence forked from a parent, then drafts reserved past both and rolled back: the child
        // keeps its blocks below the cut, the parent's table and contents are untouched.
        const uint64_t parent = next_seq++, child = next_seq++;
        const uint32_t n = uniform(rng, 1, 3 * bs);
        if (c.reserve(parent, n, 0) != TH_OK) continue;
        const auto parent_table = c.table(parent);
        for (uint32_t p = 0; p < n; ++p) c.write_position(parent_table[p / bs], p % bs, rng);
        std::vector<std::string> before;
        for (uint32_t p = 0; p < n; ++p) before.push_back(c.position_bytes(parent_table[p / bs], p % bs));
        expect(inst->call(&th_kvcache_vtable::seq_fork, "seq_fork", inst->handle(), parent, child, &err) == TH_OK,
               "seq_fork failed: " + err.text());
        c.lengths[child] = n;
        const uint32_t drafted = n + uniform(rng, 1, 2 * bs);
        if (c.reserve(child, drafted, n) != TH_OK) continue;
        const auto grown = c.table(child);
        const uint32_t keep = uniform(rng, 0, drafted);
        expect(c.truncate(child, keep) == TH_OK, "seq_truncate of a forked sequence failed");
        const auto cut = c.table(child);
        expect(cut.size() == (keep + bs - 1) / bs, "after seq_truncate(" + std::to_string(keep) + ") the sequence holds " +
                                                        std::to_string(cut.size()) + " blocks of " + std::to_string(bs));
        expect(std::equal(cut.begin(), cut.end(), grown.begin()), "seq_truncate changed the blocks it kept");
        expect(c.table(parent) == parent_table, "truncating a forked sequence changed its parent's block table");
        for (uint32_t p = 0; p < n; ++p)
          expect(c.position_bytes(parent_table[p / bs], p % bs) == before[p],
                 "truncating a forked sequence changed its parent's position " + std::to_string(p));
        c.check_accounting("after truncating a forked sequence to " + std::to_string(keep) + " positions");
        // Past its length: nothing changes.
        expect(c.truncate(child, drafted + bs) == TH_OK && c.table(child) == cut, "seq_truncate past the sequence's length changed it");
        c.free(parent);
        c.free(child);
        c.check_accounting("after freeing truncated sequences");
      }
    });
  }
  if (inst->fn(&th_kvcache_vtable::seq_drop_blocks) == nullptr) {
    r.not_applicable("kvcache.drop_blocks", "the plugin has no seq_drop_blocks (optional, ABI 1.6): engines with a sliding "
                                            "window refuse it");
  } else {
    r.rule("kvcache.drop_blocks", [&] {
      while (!c.lengths.empty()) c.free(c.lengths.begin()->first);  // room for every round
      auto drop = [&](uint64_t seq, uint32_t first, uint32_t n) {
        th_error err;
        return inst->call(&th_kvcache_vtable::seq_drop_blocks, "seq_drop_blocks", inst->handle(), seq, first, n, &err);
      };
      expect(drop(next_seq++, 0, 1) == TH_ERR_NOT_FOUND, "seq_drop_blocks of an unknown sequence did not return TH_ERR_NOT_FOUND");
      uint32_t checked = 0;
      for (uint32_t round = 0; round < o.rounds; ++round) {
        const uint64_t parent = next_seq++, child = next_seq++;
        const uint32_t n_blocks = uniform(rng, 2, 6), n = (n_blocks - 1) * bs + uniform(rng, 1, bs);
        if (c.reserve(parent, n, 0) != TH_OK) continue;
        const auto parent_table = c.table(parent);
        for (uint32_t p = 0; p < n; ++p) c.write_position(parent_table[p / bs], p % bs, rng);
        std::vector<std::string> bytes;
        for (uint32_t p = 0; p < n; ++p) bytes.push_back(c.position_bytes(parent_table[p / bs], p % bs));
        th_error err;
        expect(inst->call(&th_kvcache_vtable::seq_fork, "seq_fork", inst->handle(), parent, child, &err) == TH_OK,
               "seq_fork failed: " + err.text());
        c.lengths[child] = n;
        expect(drop(child, 0, 0) == TH_ERR_INVALID_ARGUMENT, "seq_drop_blocks of no block did not return TH_ERR_INVALID_ARGUMENT");
        expect(drop(child, n_blocks - 1, 2) == TH_ERR_INVALID_ARGUMENT,
               "seq_drop_blocks past the table's end did not return TH_ERR_INVALID_ARGUMENT");
        expect(c.table(child) == parent_table, "a refused seq_drop_blocks changed the table");
        // The last block always stays (a window keeps its most recent positions).
        const uint32_t first = uniform(rng, 0, n_blocks - 2), k = uniform(rng, 1, n_blocks - 1 - first);
        const th_status st = drop(child, first, k);
        if (st == TH_ERR_RESOURCE_EXHAUSTED) {  // no room to copy the shared blocks after the cut
          expect(c.table(child) == parent_table, "seq_drop_blocks returned TH_ERR_RESOURCE_EXHAUSTED and changed the table");
          c.free(parent);
          c.free(child);
          continue;
        }
        expect(st == TH_OK, "seq_drop_blocks(" + std::to_string(first) + ", " + std::to_string(k) + ") returned " + std::to_string(st));
        c.lengths[child] = n - k * bs;
        const auto cut = c.table(child);
        expect(cut.size() == n_blocks - k, "after dropping " + std::to_string(k) + " of " + std::to_string(n_blocks) +
                                               " blocks the sequence holds " + std::to_string(cut.size()));
        expect(std::equal(cut.begin(), cut.begin() + first, parent_table.begin()), "seq_drop_blocks changed the blocks before the cut");
        expect(c.table(parent) == parent_table, "seq_drop_blocks of a forked sequence changed its parent's table");
        for (uint32_t j = first; j < cut.size(); ++j)
          expect(cut[j] != parent_table[j + k], "block " + std::to_string(j + k) + ", shared with the parent, moved without a copy: "
                                                "the host rewrites moved blocks");
        for (uint32_t p = 0; p < n - k * bs; ++p) {
          const uint32_t from = p < first * bs ? p : p + k * bs;
          expect(c.position_bytes(cut[p / bs], p % bs) == bytes[from],
                 "position " + std::to_string(p) + " after the cut does not hold the keys and values of position " + std::to_string(from));
        }
        for (uint32_t p = 0; p < n; ++p)
          expect(c.position_bytes(parent_table[p / bs], p % bs) == bytes[p], "seq_drop_blocks changed the parent's position " + std::to_string(p));
        c.check_accounting("after seq_drop_blocks");
        c.free(parent);
        c.free(child);
        ++checked;
      }
      expect(checked > 0, "no sequence could be reserved and forked to drop blocks from");
    });
  }
  r.rule("kvcache.exhaustion_changes_nothing", [&] {
    const th_kv_stats before = c.stats();
    const uint32_t too_many = (before.free_blocks + 1) * bs;
    const th_status st = c.reserve(next_seq, too_many, 0);
    expect(st == TH_ERR_RESOURCE_EXHAUSTED, "reserving " + std::to_string(too_many) + " positions with " +
                                                std::to_string(before.free_blocks) + " free blocks returned " +
                                                std::to_string(st) + ", not TH_ERR_RESOURCE_EXHAUSTED");
    c.lengths.erase(next_seq++);
    const th_kv_stats after = c.stats();
    expect(after.used_blocks == before.used_blocks && after.free_blocks == before.free_blocks && after.n_seqs == before.n_seqs,
           "a reservation refused for lack of blocks changed the accounting");
  });
  r.rule("kvcache.free_returns_blocks", [&] {
    while (!c.lengths.empty()) c.free(c.lengths.begin()->first);
    const th_kv_stats s = c.stats();
    expect(s.free_blocks == s.total_blocks && s.n_seqs == 0 && s.shared_blocks == 0,
           "with every sequence freed, " + std::to_string(s.free_blocks) + " of " + std::to_string(s.total_blocks) +
               " blocks are free and " + std::to_string(s.n_seqs) + " sequences remain");
  });
  const bool prefix = inst->fn(&th_kvcache_vtable::seq_lookup) && inst->fn(&th_kvcache_vtable::seq_publish) &&
                      inst->fn(&th_kvcache_vtable::cache_flush);
  if (!prefix) {
    r.not_applicable("kvcache.prefix_cache", "the plugin has no seq_lookup, seq_publish and cache_flush (optional, ABI 1.5): "
                                             "its engines compute every prompt whole");
    return;
  }
  r.rule("kvcache.prefix_cache", [&] {
    auto lookup = [&](uint64_t seq, uint64_t salt, const std::vector<int32_t>& tokens, th_status want = TH_OK) {
      th_error err;
      uint32_t n = 0;
      const th_status st =
          inst->call(&th_kvcache_vtable::seq_lookup, "seq_lookup", inst->handle(), seq, salt, tokens.data(), uint32_t(tokens.size()), &n, &err);
      expect(st == want, "seq_lookup of sequence " + std::to_string(seq) + " returned " + std::to_string(st) + ": " + err.text());
      if (st == TH_OK) {
        expect(n < tokens.size(), "seq_lookup reported " + std::to_string(n) + " cached positions of a " + std::to_string(tokens.size()) +
                                      "-token prompt: the last token must be left to compute");
        c.lengths[seq] = n;
      }
      return n;
    };
    auto publish = [&](uint64_t seq, uint32_t first, const std::vector<int32_t>& tokens) {
      th_error err;
      return inst->call(&th_kvcache_vtable::seq_publish, "seq_publish", inst->handle(), seq, first, tokens.data(), uint32_t(tokens.size()), &err);
    };
    for (uint32_t round = 0; round < o.rounds; ++round) {
      // A prompt of whole blocks and a bit, computed, written, published and freed; the same prompt
      // with another last token then finds a prefix of it whose bytes are those written, by reference.
      std::vector<int32_t> prompt(uniform(rng, 2 * bs, 4 * bs) + 1);
      for (auto& t : prompt) t = int32_t(uniform(rng, 0, 50));
      const uint64_t salt = uniform(rng, 0, 1000), a = next_seq++;
      expect(lookup(a, salt, prompt) == 0 || round > 0, "seq_lookup found a prefix in an empty cache");
      const uint32_t from = c.lengths[a], n = uint32_t(prompt.size());
      expect(c.reserve(a, n, from) == TH_OK, "seq_reserve after seq_lookup failed");
      const auto table = c.table(a);
      for (uint32_t p = from; p < n; ++p) c.write_position(table[p / bs], p % bs, rng);
      std::vector<std::string> written;
      for (uint32_t p = 0; p < n; ++p) written.push_back(c.position_bytes(table[p / bs], p % bs));
      expect(publish(a, from, std::vector<int32_t>(prompt.begin() + from, prompt.end())) == TH_OK, "seq_publish failed");
      expect(publish(a, n + 1, {1}) == TH_ERR_INVALID_ARGUMENT, "seq_publish with a gap did not return TH_ERR_INVALID_ARGUMENT");
      c.free(a);
      c.check_accounting("after publishing and freeing a sequence");
      std::vector<int32_t> again = prompt;
      again.back() = again.back() + 1;
      const uint64_t b = next_seq++;
      const uint32_t cached = lookup(b, salt, again);
      expect(cached >= bs, "a prompt sharing " + std::to_string(n - 1) + " tokens with one just published found " + std::to_string(cached) +
                               " cached positions (blocks of " + std::to_string(bs) + ")");
      const auto shared = c.table(b);
      for (uint32_t p = 0; p < cached; ++p)
        expect(c.position_bytes(shared[p / bs], p % bs) == written[p], "cached position " + std::to_string(p) + " does not hold the bytes written there");
      lookup(b, salt, again, TH_ERR_INVALID_ARGUMENT);
      expect(lookup(next_seq++, salt + 1, again) == 0, "a prompt found a prefix published under another salt");
      c.check_accounting("after lookups");
      while (!c.lengths.empty()) c.free(c.lengths.begin()->first);
    }
    expect(publish(next_seq++, 0, {1}) == TH_ERR_NOT_FOUND, "seq_publish of an unknown sequence did not return TH_ERR_NOT_FOUND");
    // Cached blocks are the pool's when it needs them: a sequence may take every block.
    const uint32_t total = c.stats().total_blocks;
    expect(c.reserve(next_seq, total * bs, 0) == TH_OK, "seq_reserve of the whole pool failed while cached blocks were held by no sequence");
    c.free(next_seq++);
    inst->call(&th_kvcache_vtable::cache_flush, "cache_flush", inst->handle());
    const th_kv_stats s = c.stats();
    expect(s.free_blocks == s.total_blocks, "after cache_flush with no sequence, " + std::to_string(s.free_blocks) + " of " +
                                                std::to_string(s.total_blocks) + " blocks are free");
  });
}

}  // namespace tokenhost::conformance
