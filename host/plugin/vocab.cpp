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

std::shared_ptr<const PluginVocab> plugin_vocab(const std::vector<std::string>& texts, int32_t eos) {
  auto v = std::make_shared<PluginVocab>();
  v->offsets.reserve(texts.size() + 1);
  v->attrs.reserve(texts.size());
  v->offsets.push_back(0);
  for (const std::string& text : texts) {
    v->bytes += text;
    v->offsets.push_back(uint32_t(v->bytes.size()));
    v->attrs.push_back(text.empty() ? TH_TOKEN_CONTROL : TH_TOKEN_TEXT);
  }
  v->text_bits.assign((texts.size() + 31) / 32, 0);
  for (size_t t = 0; t < texts.size(); ++t)
    if (!texts[t].empty()) v->text_bits[t / 32] |= 1u << (t % 32);
  v->eos = eos;
  return v;
}

std::shared_ptr<const PluginVocab> plugin_vocab(const Tokenizer& tokenizer) {
  std::vector<std::string> texts(tokenizer.vocab_size());
  for (size_t t = 0; t < texts.size(); ++t)
    if (!tokenizer.is_control(int32_t(t))) texts[t] = tokenizer.token_text(int32_t(t));
  return plugin_vocab(texts, tokenizer.eos());
}

}  // namespace tokenhost
