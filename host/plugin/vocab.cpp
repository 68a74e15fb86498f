#include "plugin/vocab.hpp"

#include "model/tokenizer.hpp"

namespace tokenhost {

th_vocab PluginVocab::to_abi() const {
  th_vocab v{};
  v.struct_size = sizeof(th_vocab);
  v.n_tokens = uint32_t(attrs.size());
  v.bytes = reinterpret_cast<const uint8_t*>(bytes.data());
  v.offsets = offsets.data();
  v.attrs = attrs.data();
  v.eos = eos;
  return v;
}

std::shared_ptr<const PluginVocab> plugin_vocab(const Tokenizer& tokenizer) {
  auto v = std::make_shared<PluginVocab>();
  const size_t n = tokenizer.vocab_size();
  v->offsets.reserve(n + 1);
  v->attrs.reserve(n);
  v->offsets.push_back(0);
  for (size_t t = 0; t < n; ++t) {
    const std::string text = tokenizer.is_control(int32_t(t)) ? std::string() : tokenizer.token_text(int32_t(t));
    v->bytes += text;
    v->offsets.push_back(uint32_t(v->bytes.size()));
    v->attrs.push_back(text.empty() ? TH_TOKEN_CONTROL : TH_TOKEN_TEXT);
  }
  v->eos = tokenizer.eos();
  return v;
}

}  // namespace tokenhost
