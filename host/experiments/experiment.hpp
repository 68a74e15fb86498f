// An A/B experiment on one model: between engines serving it (an arm is an engine), or between router
// configurations over the same engines (an arm is a router plugin with its config, which plans the
// arm's requests: cascade thresholds, routing policies); its definition, its validation, and how a
// request is assigned to an arm.
//
// Assignment is sticky: a request's key (its session, user or API key, as the experiment says) and the
// experiment's name hash to a bucket in [0, 100) with a fixed function (FNV-1a 64 then the SplitMix64
// finalizer), so the same key lands on the same arm on every run, machine and restart, as long as the
// split is unchanged. A request without a key gets a random bucket.
//
// Hold-back: an arm may be held back for request classes ("batch"): a request of such a class never
// goes to it. It is served by the other arms in their proportions and left out of the comparison
// (the arms would otherwise see different mixes of classes), counted as held back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "plugin/kind.hpp"

namespace tokenhost::experiments {

enum class StickyKey { session, user, api_key, none };

// "session", "user", "api_key", "none".
const char* sticky_key_name(StickyKey key);
std::optional<StickyKey> sticky_key_from_name(const std::string& name);

// The key that names a router arm's plugin ("arms": [{"router": ...}]): the router slot's name, since
// the arm fills that slot for its requests.
inline std::string router_arm_key() { return slot_of(TH_KIND_ROUTER).name(); }

struct ArmSpec {
  std::string name;
  std::string engine;  // an engine arm's engine; "" for a router arm
  int percent = 0;                           // of the experiment's traffic, 0-100; the arms' sum is 100
  std::vector<std::string> holdback_classes;  // request classes this arm never serves
  // A router arm's router plugin and its config (a JSON object); "" for an engine arm.
  std::string router = "";
  nlohmann::json router_config = nlohmann::json::object();
};

struct ExperimentSpec {
  std::string name;
  // The model (or group) a router-arm experiment splits; "" for engine arms (their engines' model).
  std::string model;
  StickyKey sticky_key = StickyKey::session;
  std::vector<ArmSpec> arms;  // the first is the baseline the others are compared with
  bool allow_request_choice = false;  // a request may pick its arm ("tokenhost": {"arm": ...})
  uint32_t min_samples = 30;  // per arm and metric, before any verdict
};

// One thing wrong with a definition or a change. `path` locates it in the document the definition
// came from: keys and array indices from the experiment's root, e.g. {"arms", "1", "percent"}; empty
// for the whole experiment.
struct Problem {
  std::vector<std::string> path;
  std::string message;
  int http_status = 400;  // 404: an unknown engine or experiment; 409: a conflict with the running state
  bool at_key = false;    // about the key at `path` (an unknown field) rather than its value
};

// "arms[1].percent" for messages.
std::string path_text(const std::vector<std::string>& path);

// What validation needs to know about the server: engines (name -> model), and the engines of other
// running experiments (an engine is an arm of at most one running experiment, and a model has at most
// one running experiment: a request must know which split applies to it).
struct EngineView {
  std::string name;
  std::string model;
  std::string experiment;  // the running experiment it is an arm of, "" if none
};

// Every problem of spec, in document order; empty when it is valid. Checks: a name of letters, digits,
// '_', '-' (it appears in URLs and metric labels); at least two arms with unique names of the same
// kind (all engines or all routers; router arms need the experiment's model; whether the model is
// served and the routers load is the server's to check); engines that exist, are distinct and serve one model; percents 0-100 summing to 100; no request
// class held back from every arm (or from every arm with traffic); no engine in another running
// experiment; no other running experiment on the model.
std::vector<Problem> validate(const ExperimentSpec& spec, const std::vector<EngineView>& engines,
                              const std::vector<std::string>& running_experiments_on_model = {});

// A definition from the admin API's JSON ({"name", "sticky_key", "arms": [{"name", "engine", "percent",
// "holdback_classes"?}], "allow_request_choice"?, "min_samples"?}). Shape problems (unknown keys, wrong
// types, missing fields) are returned; the semantic checks are validate()'s.
std::variant<ExperimentSpec, std::vector<Problem>> spec_from_json(const nlohmann::json& body);

// A split change from the admin API ({"arms": [{"name", "percent"?, "holdback_classes"?}]}) applied to
// a copy of spec; arms not named keep their settings. Returns the changed spec or its problems (the
// result still needs validate()).
std::variant<ExperimentSpec, std::vector<Problem>> apply_change(const ExperimentSpec& spec, const nlohmann::json& body);

// The bucket in [0, 100) of `key` in experiment `experiment`: stable across runs and platforms.
uint32_t bucket_of(const std::string& experiment, const std::string& key);
// The 64-bit hash behind bucket_of (FNV-1a of experiment, a NUL byte, key; then SplitMix64's finalizer).
uint64_t assignment_hash(const std::string& experiment, const std::string& key);

// Where a request goes: the arm index, and whether it counts in the comparison.
struct Assignment {
  size_t arm = 0;
  bool held_back = false;  // its class is held back from some arm: served, not compared
};

// The arm for a request in `bucket` of class `request_class` ("" none). Arms take consecutive ranges
// of buckets in their order. When the class is held back from some arms, the bucket is rescaled over
// the arms that serve it, in their proportions. spec must be valid. `down` (one flag per arm, or
// empty) marks arms whose engine is down: the bucket is rescaled over the others the same way (when
// every arm that would serve it is down, the assignment ignores `down`).
Assignment assign(const ExperimentSpec& spec, uint32_t bucket, const std::string& request_class,
                  const std::vector<bool>& down = {});

}  // namespace tokenhost::experiments
