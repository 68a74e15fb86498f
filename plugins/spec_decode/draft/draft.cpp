// spec_decode.draft: draft-model speculation. A smaller model of the deployment that shares the target's
// tokenizer drafts each sequence's next tokens greedily; the host runs it in draft sessions (ABI 1.5),
// one per sequence, with a KV pool of its own (sdk::DraftSessionProposer).
#include <tokenhost/plugin_draft.hpp>

#include <memory>
#include <string>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

constexpr const char* kId = TH_PLUGIN_ID;  // plugin.toml's id (tokenhost_add_plugin)

struct Settings {
  std::string model;  // "": the engine's own (every greedy draft accepted: verification's cost alone)
  float min_prob;
};

Settings read_settings(const th_config* config) {
  const sdk::Config cfg(config);
  return Settings{cfg.require_string("model"), float(cfg.require_double("min_prob"))};
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": check() got NULL");
    read_settings(query->config);  // the model itself is checked at create(), by opening a session on it
  });
}

struct Draft {
  Draft(const th_create_args& args, th_error* err)
      : settings(read_settings(args.config)), sessions(args, err, kId, settings.model, 0, settings.min_prob) {}
  Settings settings;
  sdk::DraftSessionProposer sessions;
};

const th_spec_decode_vtable kVtable = {
    sizeof(th_spec_decode_vtable),
    sdk::create_instance<Draft>,
    sdk::destroy_instance<Draft>,
    check,
    sdk::draft_propose<Draft>,
    nullptr,  // accepted: the session is synced from the sequence's tokens at the next propose
    sdk::draft_seq_end<Draft>,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_SPEC_DECODE, kId, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
