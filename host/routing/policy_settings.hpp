// A guard policy's settings as the admin API sends them and the manifest declares them (a JSON object
// of "key": value), read key by key for routing/breaker.hpp and routing/overload.hpp: unknown keys,
// wrong types and values out of range throw std::invalid_argument naming "<table>.<key>" and what it
// must be, prefixed by where the change came from.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace tokenhost::routing {

class PolicySettings {
 public:
  // change: the settings; table: the policy's name in messages ("breakers"); keys: those it takes.
  PolicySettings(const nlohmann::json& change, std::string table, std::string where, std::initializer_list<const char*> keys)
      : change_(change), table_(std::move(table)), where_(std::move(where)) {
    if (!change_.is_object()) throw std::invalid_argument(where_ + ": " + table_ + " must be an object of settings, not " + change_.dump());
    std::string list;
    for (const char* k : keys) list += std::string(list.empty() ? "" : ", ") + k;
    for (const auto& [key, value] : change_.items()) {
      bool known = false;
      for (const char* k : keys) known = known || key == k;
      if (!known) throw std::invalid_argument(where_ + ": " + table_ + " has no setting '" + key + "' (" + list + ")");
    }
  }
  // The value of key, or NULL when the change leaves it out.
  const nlohmann::json* find(const char* key) const {
    auto it = change_.find(key);
    return it == change_.end() ? nullptr : &*it;
  }
  [[noreturn]] void fail(const std::string& what) const { throw std::invalid_argument(where_ + ": " + table_ + "." + what); }
  void read(const char* key, bool& out) const {
    if (const auto* v = find(key)) {
      if (!v->is_boolean()) fail(std::string(key) + " must be true or false, not " + v->dump());
      out = v->get<bool>();
    }
  }
  // An integer in lo..hi; note: what the range's ends mean, for the message ("" none).
  void read(const char* key, uint32_t lo, uint32_t hi, uint32_t& out, const std::string& note = "") const {
    if (const auto* v = find(key)) {
      if (!v->is_number_integer() || v->get<int64_t>() < int64_t(lo) || v->get<int64_t>() > int64_t(hi))
        fail(std::string(key) + " must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + (note.empty() ? "" : " (" + note + ")") +
             ", not " + v->dump());
      out = uint32_t(v->get<int64_t>());
    }
  }

 private:
  const nlohmann::json& change_;
  const std::string table_, where_;
};

}  // namespace tokenhost::routing
