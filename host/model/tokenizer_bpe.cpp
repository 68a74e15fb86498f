// Byte-level BPE ("gpt2" tokenizers: Llama 3, Qwen2, GPT-2, Falcon, StarCoder, DeepSeek, ...): GPT-2's
// byte to code point mapping and merging by rank. The pre-tokenizers are in pretokenizer.cpp.
#include <array>
#include <stdexcept>

#include "model/tokenizer.hpp"

#include "model/symbol_merge.hpp"
#include "model/unicode.hpp"

namespace tokenhost {

namespace {

// ---- GPT-2 byte mapping: printable bytes map to themselves, the other 68 to U+0100.. in byte order.

struct ByteMap {
  std::array<std::string, 256> encode;  // byte -> UTF-8 of its code point
  std::array<int16_t, 0x200> decode;    // code point -> byte, or -1
  ByteMap() {
    decode.fill(-1);
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? b : next++;
      unicode::append_utf8(encode[b], cp);
      decode[cp] = int16_t(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

std::string gpt2_byte_encode(std::string_view bytes) {
  const ByteMap& map = byte_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += map.encode[uint8_t(c)];
  return out;
}

std::string gpt2_byte_decode(std::string_view text) {
  const ByteMap& map = byte_map();
  const unicode::CodePoints cps = unicode::decode_utf8(text);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < cps.cps.size(); ++i) {
    const uint32_t cp = cps.cps[i];
    if (cp < map.decode.size() && map.decode[cp] >= 0) {
      out += char(map.decode[cp]);
    } else {
      out.append(text.substr(cps.offsets[i], cps.offsets[i + 1] - cps.offsets[i]));
    }
  }
  return out;
}

void Tokenizer::init_bpe() {
  pre_ = pre_tokenizer_from_name(spec_.pre);
  ignore_merges_ = pre_ == PreTokenizer::llama3;
  merge_ranks_.reserve(spec_.merges.size());
  for (size_t rank = 0; rank < spec_.merges.size(); ++rank) {
    const std::string& merge = spec_.merges[rank];
    const size_t space = merge.find(' ', 1);
    auto bad = [&](const std::string& why) {
      throw std::invalid_argument("tokenizer: merge " + std::to_string(rank) + " '" + merge + "' " + why);
    };
    if (space == std::string::npos || space + 1 >= merge.size()) bad("is not two tokens separated by a space");
    const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
    if (find_token(left) < 0) bad("names unknown token '" + left + "'");
    if (find_token(right) < 0) bad("names unknown token '" + right + "'");
    if (find_token(left + right) < 0) bad("makes '" + left + right + "', which is not a token");
    merge_ranks_.emplace(merge, int32_t(rank));  // the first rank of a repeated merge stands
  }
}

// llama.cpp's llm_tokenizer_bpe: pre-tokenize, map each word's bytes to code points, split into one
// symbol per byte, merge the adjacent pair of lowest rank (ties: leftmost) until none is left.
void Tokenizer::encode_bpe(std::string_view fragment, std::vector<int32_t>& out) const {
  const ByteMap& map = byte_map();
  std::vector<MergeSymbol> symbols;  // offsets and lengths in the mapped word
  std::string key;
  for (const std::string& word : pretokenize(pre_, fragment)) {
    const std::string mapped = gpt2_byte_encode(word);
    if (ignore_merges_) {
      const int32_t id = find_token(mapped);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    symbols.clear();
    for (size_t i = 0, offset = 0; i < word.size(); ++i) {
      const size_t length = map.encode[uint8_t(word[i])].size();
      symbols.push_back({int(i) - 1, i + 1 == word.size() ? -1 : int(i) + 1, offset, length});
      offset += length;
    }
    // A lower merge rank merges first.
    merge_symbols(symbols, [&](int left, int right) -> std::optional<int64_t> {
      const MergeSymbol& l = symbols[size_t(left)];
      const MergeSymbol& r = symbols[size_t(right)];
      key.assign(mapped, l.offset, l.length);
      key += ' ';
      key.append(mapped, r.offset, r.length);
      auto it = merge_ranks_.find(key);
      if (it == merge_ranks_.end()) return std::nullopt;
      return -int64_t(it->second);
    });
    for (int i = 0; i != -1 && !symbols.empty(); i = symbols[size_t(i)].next) {
      const MergeSymbol& s = symbols[size_t(i)];
      const int32_t id = find_token(std::string_view(mapped).substr(s.offset, s.length));
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // Only a byte whose mapped character is missing from the vocabulary gets here (merge results
      // are checked to be tokens); llama.cpp drops it, unk keeps a trace of it.
      if (spec_.unk >= 0) out.push_back(spec_.unk);
    }
  }
}

}  // namespace tokenhost
