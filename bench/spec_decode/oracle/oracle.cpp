// spec_decode.oracle: the proposer bench/spec_decode/run.sh measures verification with. It knows the
// continuation of a sequence because it saw it before: every sequence it is asked about is kept when it
// ends (its tokens as of the last call), and a later sequence whose tokens are a prefix of a kept one
// gets the kept tokens that follow as its draft (draft_len of them). The bench runs its prompts once to
// fill it, then again to measure; with `continuations` set, what one instance kept serves the instances
// made later (the bench swaps in one per setting). Each draft token is replaced by a different one with
// probability 1 - accept_rate, decided by a hash of (seed, the position, the token): the acceptance the
// bench asks for, independently per position, the same in every run. Greedy decoding only: a sampled
// request's continuation is not the one kept.
#include <tokenhost/plugin_spec.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <deque>
#include <map>
#include <unordered_map>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;

// How many leading tokens index a kept continuation (prompts shorter than this are indexed whole).
constexpr uint32_t kKeyTokens = 32;

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t key_of(const int32_t* tokens, uint32_t n) {
  uint64_t h = n < kKeyTokens ? n : kKeyTokens;
  for (uint32_t i = 0; i < std::min(n, kKeyTokens); ++i) h = mix(h ^ uint32_t(tokens[i]));
  return h;
}

struct Oracle {
  explicit Oracle(const th_create_args& args)
      : vocab(args.model != nullptr ? args.model->vocab_size : 0),
        accept_rate(sdk::Config(args.config).require_double("accept_rate")),
        seed(uint64_t(sdk::Config(args.config).require_int("seed"))),
        max_records(size_t(sdk::Config(args.config).require_int("max_records"))),
        draft_len(uint32_t(sdk::Config(args.config).require_int("draft_len"))),
        file(sdk::Config(args.config).get_string("continuations", "")) {
    read_file();
  }
  uint32_t vocab;
  double accept_rate;
  uint64_t seed;
  size_t max_records;
  uint32_t draft_len;
  std::string file;  // "" : memory only
  long file_offset = 0;  // how far the file was read
  uint64_t next_id = 0;
  std::map<uint64_t, std::vector<int32_t>> records;        // by record id (oldest first)
  std::unordered_multimap<uint64_t, uint64_t> by_key;      // key_of(first tokens) -> record id
  std::unordered_map<uint64_t, std::vector<int32_t>> live;  // seq_id -> its tokens at the last call

  // The kept continuation whose first n tokens are these, or NULL (the id of the longest into *id).
  const std::vector<int32_t>* find(const int32_t* tokens, uint32_t n, uint64_t* id) const {
    const std::vector<int32_t>* best = nullptr;
    auto [b, e] = by_key.equal_range(key_of(tokens, n));
    for (auto it = b; it != e; ++it) {
      const auto& r = records.at(it->second);
      if (r.size() >= n && std::memcmp(r.data(), tokens, n * sizeof(int32_t)) == 0 && (!best || r.size() > best->size()))
        best = &r, *id = it->second;
    }
    return best;
  }

  // Reads the continuations appended to the file since the last read (complete ones only).
  void read_file() {
    if (file.empty()) return;
    FILE* f = std::fopen(file.c_str(), "rb");
    if (f == nullptr) return;
    std::fseek(f, file_offset, SEEK_SET);
    uint32_t n = 0;
    std::vector<int32_t> tokens;
    while (std::fread(&n, sizeof n, 1, f) == 1 && n < (1u << 24)) {
      tokens.resize(n);
      if (std::fread(tokens.data(), sizeof(int32_t), n, f) != n) break;
      file_offset += long(sizeof n + n * sizeof(int32_t));
      add(tokens);
    }
    std::fclose(f);
  }

  // Appends one continuation with one write, so that instances appending at once do not interleave.
  void append_to_file(const std::vector<int32_t>& tokens) {
    if (file.empty()) return;
    std::vector<int32_t> buf(1 + tokens.size());
    buf[0] = int32_t(tokens.size());
    std::copy(tokens.begin(), tokens.end(), buf.begin() + 1);
    if (FILE* f = std::fopen(file.c_str(), "ab")) {
      std::setvbuf(f, nullptr, _IONBF, 0);
      std::fwrite(buf.data(), sizeof(int32_t), buf.size(), f);
      std::fclose(f);
    }
  }

  bool add(const std::vector<int32_t>& tokens) {
    if (tokens.size() < 2) return false;
    uint64_t id = 0;
    if (find(tokens.data(), uint32_t(tokens.size()), &id) != nullptr) return false;  // nothing new
    records.emplace(next_id, tokens);
    by_key.emplace(key_of(tokens.data(), uint32_t(tokens.size())), next_id++);
    while (records.size() > max_records) {
      auto oldest = records.begin();
      auto [b, e] = by_key.equal_range(key_of(oldest->second.data(), uint32_t(oldest->second.size())));
      for (auto it = b; it != e; ++it)
        if (it->second == oldest->first) {
          by_key.erase(it);
          break;
        }
      records.erase(oldest);
    }
    return true;
  }

  void keep(const std::vector<int32_t>& tokens) {
    read_file();  // another instance may have kept it already
    if (add(tokens)) append_to_file(tokens);
  }

  void propose_one(const th_spec_propose_args* args, uint32_t k) {
    const th_spec_seq& seq = args->seqs[k];
    th_spec_draft& draft = args->drafts[k];
    draft.n_draft = 0;
    live[seq.seq_id].assign(seq.tokens, seq.tokens + seq.n_tokens);
    uint64_t id = 0;
    const std::vector<int32_t>* r = find(seq.tokens, seq.n_tokens, &id);
    if (r == nullptr) {
      read_file();
      r = find(seq.tokens, seq.n_tokens, &id);
    }
    if (r == nullptr || vocab < 2) return;
    const uint32_t n = std::min({sdk::seq_max_draft(args, k), draft_len, uint32_t(r->size() - seq.n_tokens)});
    for (uint32_t j = 0; j < n; ++j) {
      const uint32_t at = seq.n_tokens + j;
      int32_t t = (*r)[at];
      const uint64_t h = mix(seed ^ mix((uint64_t(at) << 32) ^ uint32_t(t)));
      if (double(h >> 11) * 0x1.0p-53 >= accept_rate) t = int32_t((uint32_t(t) + 1 + uint32_t(h % (vocab - 1))) % vocab);
      draft.tokens[j] = t;
      draft.parents[j] = int32_t(j) - 1;
    }
    draft.n_draft = n;
  }
};

th_status check(const th_check_query*, th_error*) { return TH_OK; }

th_status propose(th_instance* instance, const th_spec_propose_args* args, th_error* err) {
  return sdk::guard(err, [&] {
    sdk::check_propose_args("spec_decode.oracle", args);
    Oracle& self = sdk::self<Oracle>(instance);
    for (uint32_t k = 0; k < args->n_seqs; ++k) self.propose_one(args, k);
  });
}

void seq_end(th_instance* instance, uint64_t seq_id) {
  Oracle& self = sdk::self<Oracle>(instance);
  auto it = self.live.find(seq_id);
  if (it == self.live.end()) return;
  try {
    self.keep(it->second);
  } catch (...) {  // out of memory: the continuation is not kept (a later run drafts less), nothing else
  }
  self.live.erase(it);
}

const th_spec_decode_vtable kVtable = {
    sizeof(th_spec_decode_vtable), sdk::create_instance<Oracle>, sdk::destroy_instance<Oracle>, check, propose,
    nullptr, seq_end,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_SPEC_DECODE, TH_PLUGIN_ID, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
