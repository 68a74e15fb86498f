// A GGUF model and a generator over it in this process, as `generate` and `perplexity` run them: the
// file loaded and placed on the CPU, the attention, kvcache and (a model with experts) moe plugins
// instantiated from the catalog with their configs, and the `--set SLOT=PLUGIN` / `--set
// SLOT.KEY=VALUE` flags that choose them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "model/tokenizer.hpp"
#include "runtime/generator.hpp"
#include "runtime/gguf_model.hpp"

namespace tokenhost {

struct InProcessSetup {
  std::string model_path;
  // The plugin of each slot a generator has, by slot name; configs by slot name too.
  std::map<std::string, std::string> plugins{
      {"attention", "attention.cpu_flash"}, {"kvcache", "kvcache.paged"}, {"moe", "moe.topk"}};
  std::map<std::string, toml::table> configs;
  std::string kv_dtype = "f16";  // the KV cache's elements, as an engine's kv_dtype
  uint32_t block_size = 16;      // kvcache's block_size unless its config sets one
  uint32_t positions = 0;        // the longest sequence the KV pool must hold (n_blocks unless set)
  uint32_t prefill_chunk = 512;
};

// Applies one --set: "SLOT=PLUGIN" chooses a slot's plugin, "SLOT.KEY=VALUE" sets a key of its config
// (VALUE read as TOML: 128, 0.5, true, "text"; a bare word is a string). Throws std::invalid_argument
// naming the flag for a slot the in-process generator lacks or a malformed setting.
void apply_set_flag(InProcessSetup& setup, const std::string& flag);

struct InProcessModel {
  LoadedModel model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Generator> generator;
};

// Loads the model (logging its shape) and its tokenizer; build_generator then instantiates the plugins
// and the generator (setup.positions known by then: a prompt's length needs the tokenizer). Each
// throws what the loader, the catalog or a plugin's config check throws, naming the file or plugin.
InProcessModel load_in_process(const InProcessSetup& setup);
void build_generator(InProcessModel& m, const InProcessSetup& setup);

}  // namespace tokenhost
