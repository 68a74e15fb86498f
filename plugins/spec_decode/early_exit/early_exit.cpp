// spec_decode.early_exit: self-speculation. The engine's own model, cut after its first `layers` layers
// (then its output norm and head), drafts each sequence's next tokens greedily: no weights beyond the
// target's, a KV pool of the cut model's own size. Run by the host in draft sessions (ABI 1.5), one per
// sequence (sdk::DraftSessionProposer).
#include <tokenhost/plugin_draft.hpp>

#include <string>

namespace {

namespace sdk = tokenhost::sdk;
using sdk::Error;

constexpr const char* kId = TH_PLUGIN_ID;  // plugin.toml's id (tokenhost_add_plugin)

struct Settings {
  uint32_t layers;  // 0: half the model's
  float min_prob;
};

// The layers the draft runs for a model of n_layers: the setting, or half of them rounded up.
uint32_t draft_layers(const Settings& s, uint32_t n_layers) {
  if (s.layers > n_layers)
    throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": layers = " + std::to_string(s.layers) + ", but the model has " +
                                             std::to_string(n_layers));
  return s.layers > 0 ? s.layers : (n_layers + 1) / 2;
}

Settings read_settings(const th_config* config) {
  const sdk::Config cfg(config);
  return Settings{uint32_t(cfg.require_int("layers")), float(cfg.require_double("min_prob"))};
}

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&] {
    if (query == nullptr || query->model == nullptr) throw Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": check() got NULL");
    draft_layers(read_settings(query->config), query->model->n_layers);
  });
}

struct EarlyExit {
  EarlyExit(const th_create_args& args, th_error* err)
      : settings(read_settings(args.config)),
        sessions(args, err, kId, "", draft_layers(settings, args.model->n_layers), settings.min_prob) {}
  Settings settings;
  sdk::DraftSessionProposer sessions;
};

const th_spec_decode_vtable kVtable = {
    sizeof(th_spec_decode_vtable),
    sdk::create_instance<EarlyExit>,
    sdk::destroy_instance<EarlyExit>,
    check,
    sdk::draft_propose<EarlyExit>,
    nullptr,  // accepted: the session is synced from the sequence's tokens at the next propose
    sdk::draft_seq_end<EarlyExit>,
};

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_SPEC_DECODE, kId, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
