#include "metrics/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <stdexcept>
#include <system_error>

namespace tokenhost::metrics {

namespace {

bool is_alpha_(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string quote(const std::string& s) { return "'" + s + "'"; }

std::string join(const std::vector<std::string>& names) {
  std::string out = "[";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += ", ";
    out += quote(names[i]);
  }
  return out + "]";
}

std::string join(const std::vector<double>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ", ";
    out += format_value(values[i]);
  }
  return out + "]";
}

// Appends `{name="value",...}` (plus an optional trailing le label); nothing when there are no labels.
void write_labels(std::string& out, const std::vector<std::string>& names,
                  const std::vector<std::string>& values, const std::string* le = nullptr) {
  if (names.empty() && le == nullptr) return;
  out += '{';
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += ',';
    out += names[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  if (le != nullptr) {
    if (!names.empty()) out += ',';
    out += "le=\"";
    out += *le;
    out += '"';
  }
  out += '}';
}

}  // namespace

const char* type_name(Type type) {
  switch (type) {
    case Type::counter: return "counter";
    case Type::gauge: return "gauge";
    case Type::histogram: return "histogram";
  }
  return "untyped";
}

const std::vector<double>& default_buckets() {
  static const std::vector<double> buckets{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                           0.25,  0.5,    1,     2.5,  5,     10};
  return buckets;
}

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::to_chars_result result;
  // Integral values that fit an int64 are printed as plain integers ("3", not "3e+00" or "3.0").
  if (value == std::trunc(value) && std::fabs(value) < 9.0e18) {
    result = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(value));
  } else {
    result = std::to_chars(buf, buf + sizeof buf, value);  // shortest round-trip representation
  }
  if (result.ec != std::errc()) throw std::runtime_error("metrics: cannot format a number");
  return std::string(buf, result.ptr);
}

std::string escape_help(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"') out += "\\\"";
    else out += c;
  }
  return out;
}

bool valid_metric_name(const std::string& name) {
  if (name.empty()) return false;
  if (!is_alpha_(name[0]) && name[0] != ':') return false;
  return std::all_of(name.begin() + 1, name.end(),
                     [](char c) { return is_alpha_(c) || is_digit(c) || c == ':'; });
}

bool valid_label_name(const std::string& name) {
  if (name.empty() || !is_alpha_(name[0])) return false;
  if (name.rfind("__", 0) == 0) return false;
  return std::all_of(name.begin() + 1, name.end(), [](char c) { return is_alpha_(c) || is_digit(c); });
}

// ---------------------------------------------------------------------------------------------------
// Family

Family::Family(Type type, std::string name, std::string help, std::vector<std::string> label_names,
               std::vector<double> buckets)
    : type_(type),
      name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      buckets_(std::move(buckets)) {
  // A family without labels has exactly one series; it exists from the start, so it is exported
  // (as 0) before the first update, as the Prometheus client libraries do.
  if (label_names_.empty()) series_locked({});
}

void Family::fail(const std::string& what) const {
  throw std::invalid_argument("metric family '" + name_ + "': " + what);
}

void Family::check_arity(const std::vector<std::string>& label_values) const {
  if (label_values.size() != label_names_.size()) {
    fail("expected " + std::to_string(label_names_.size()) + " label value(s) for " +
         join(label_names_) + ", got " + std::to_string(label_values.size()));
  }
}

void Family::require(Type wanted, const char* operation) const {
  if (type_ != wanted) {
    fail(std::string(operation) + "() needs a " + type_name(wanted) + ", but this family is a " +
         type_name(type_));
  }
}

Family::Series& Family::series_locked(const std::vector<std::string>& label_values) {
  auto it = series_.find(label_values);
  if (it == series_.end()) {
    it = series_.emplace(label_values, Series{}).first;
    if (type_ == Type::histogram) it->second.per_bucket.assign(buckets_.size() + 1, 0);
  }
  return it->second;
}

const Family::Series* Family::find_locked(const std::vector<std::string>& label_values) const {
  auto it = series_.find(label_values);
  return it == series_.end() ? nullptr : &it->second;
}

void Family::add(const std::vector<std::string>& label_values, double delta) {
  check_arity(label_values);
  if (type_ == Type::histogram) fail("add() needs a counter or a gauge, but this family is a histogram");
  if (type_ == Type::counter && !(delta >= 0)) {
    fail("a counter can only increase, got delta " + format_value(delta));
  }
  std::lock_guard lock(mutex_);
  series_locked(label_values).value += delta;
}

void Family::set(const std::vector<std::string>& label_values, double value) {
  check_arity(label_values);
  require(Type::gauge, "set");
  std::lock_guard lock(mutex_);
  series_locked(label_values).value = value;
}

void Family::observe(const std::vector<std::string>& label_values, double value) {
  check_arity(label_values);
  require(Type::histogram, "observe");
  // Index of the first upper bound >= value (le means "less than or equal"); NaN goes to +Inf.
  std::size_t index = buckets_.size();
  if (!std::isnan(value)) {
    index = static_cast<std::size_t>(std::lower_bound(buckets_.begin(), buckets_.end(), value) -
                                     buckets_.begin());
  }
  std::lock_guard lock(mutex_);
  Series& s = series_locked(label_values);
  ++s.per_bucket[index];
  ++s.count;
  s.sum += value;
}

double Family::value(const std::vector<std::string>& label_values) const {
  check_arity(label_values);
  if (type_ == Type::histogram) fail("value() needs a counter or a gauge, but this family is a histogram");
  std::lock_guard lock(mutex_);
  const Series* s = find_locked(label_values);
  return s ? s->value : 0.0;
}

uint64_t Family::count(const std::vector<std::string>& label_values) const {
  check_arity(label_values);
  require(Type::histogram, "count");
  std::lock_guard lock(mutex_);
  const Series* s = find_locked(label_values);
  return s ? s->count : 0;
}

double Family::sum(const std::vector<std::string>& label_values) const {
  check_arity(label_values);
  require(Type::histogram, "sum");
  std::lock_guard lock(mutex_);
  const Series* s = find_locked(label_values);
  return s ? s->sum : 0.0;
}

std::vector<uint64_t> Family::bucket_counts(const std::vector<std::string>& label_values) const {
  check_arity(label_values);
  require(Type::histogram, "bucket_counts");
  std::vector<uint64_t> out(buckets_.size() + 1, 0);
  std::lock_guard lock(mutex_);
  if (const Series* s = find_locked(label_values)) {
    uint64_t running = 0;
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = running += s->per_bucket[i];
  }
  return out;
}

void Family::remove(const std::vector<std::string>& label_values) {
  check_arity(label_values);
  std::lock_guard lock(mutex_);
  series_.erase(label_values);
}

std::size_t Family::series_count() const {
  std::lock_guard lock(mutex_);
  return series_.size();
}

void Family::write_prometheus(std::string& out, const DerivedLabels* derived) const {
  out += "# HELP " + name_ + ' ' + escape_help(help_) + '\n';
  out += "# TYPE " + name_ + ' ' + type_name(type_) + '\n';

  // Derived labels apply to families with the key label and none of the derived names.
  std::vector<std::string> names = label_names_;
  size_t key_index = label_names_.size();
  if (derived != nullptr && !derived->names.empty()) {
    auto key = std::find(label_names_.begin(), label_names_.end(), derived->key);
    bool clash = std::any_of(derived->names.begin(), derived->names.end(), [&](const std::string& n) {
      return std::find(label_names_.begin(), label_names_.end(), n) != label_names_.end();
    });
    if (key != label_names_.end() && !clash) {
      key_index = size_t(key - label_names_.begin());
      names.insert(names.end(), derived->names.begin(), derived->names.end());
    }
  }
  auto labelled = [&](const std::vector<std::string>& values) {
    if (key_index == label_names_.size()) return values;
    std::vector<std::string> out_values = values;
    auto it = derived->values_by_key.find(values[key_index]);
    for (size_t i = 0; i < derived->names.size(); ++i)
      out_values.push_back(it != derived->values_by_key.end() && i < it->second.size() ? it->second[i] : "");
    return out_values;
  };

  std::vector<std::string> le_labels;
  if (type_ == Type::histogram) {
    for (double bound : buckets_) le_labels.push_back(format_value(bound));
    le_labels.emplace_back("+Inf");
  }

  std::lock_guard lock(mutex_);
  for (const auto& [raw_values, s] : series_) {
    const std::vector<std::string> values = labelled(raw_values);
    if (type_ != Type::histogram) {
      out += name_;
      write_labels(out, names, values);
      out += ' ' + format_value(s.value) + '\n';
      continue;
    }
    uint64_t cumulative = 0;
    for (std::size_t i = 0; i < le_labels.size(); ++i) {
      cumulative += s.per_bucket[i];
      out += name_ + "_bucket";
      write_labels(out, names, values, &le_labels[i]);
      out += ' ' + std::to_string(cumulative) + '\n';
    }
    out += name_ + "_sum";
    write_labels(out, names, values);
    out += ' ' + format_value(s.sum) + '\n';
    out += name_ + "_count";
    write_labels(out, names, values);
    out += ' ' + std::to_string(s.count) + '\n';
  }
}

// ---------------------------------------------------------------------------------------------------
// Registry

Family& Registry::family(Type type, const std::string& name, const std::string& help,
                         std::vector<std::string> label_names, std::vector<double> buckets) {
  auto bad = [&](const std::string& what) {
    throw std::invalid_argument("metric family '" + name + "': " + what);
  };
  if (!valid_metric_name(name)) {
    throw std::invalid_argument("invalid metric name '" + name +
                                "': must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
  std::set<std::string> seen;
  for (const auto& label : label_names) {
    if (!valid_label_name(label)) {
      bad("invalid label name '" + label + "': must match [a-zA-Z_][a-zA-Z0-9_]* and not start with '__'");
    }
    if (type == Type::histogram && label == "le") bad("label name 'le' is reserved for histogram buckets");
    if (!seen.insert(label).second) bad("duplicate label name '" + label + "'");
  }
  if (type == Type::histogram) {
    if (buckets.empty()) buckets = default_buckets();
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      if (!std::isfinite(buckets[i])) bad("bucket bounds must be finite, got " + format_value(buckets[i]));
      if (i > 0 && !(buckets[i - 1] < buckets[i])) {
        bad("bucket bounds must be strictly ascending, got " + join(buckets));
      }
    }
  } else if (!buckets.empty()) {
    bad(std::string("buckets are only valid for histograms, not for a ") + type_name(type));
  }

  std::lock_guard lock(mutex_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    Family& existing = *it->second;
    if (existing.type() != type) {
      bad(std::string("already registered as a ") + type_name(existing.type()) + ", requested a " +
          type_name(type));
    }
    if (existing.label_names() != label_names) {
      bad("already registered with label names " + join(existing.label_names()) + ", requested " +
          join(label_names));
    }
    if (existing.buckets() != buckets) {
      bad("already registered with buckets " + join(existing.buckets()) + ", requested " + join(buckets));
    }
    return existing;
  }
  std::unique_ptr<Family> created(
      new Family(type, name, help, std::move(label_names), std::move(buckets)));
  Family& ref = *created;
  families_.emplace(name, std::move(created));
  return ref;
}

Family* Registry::find(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto it = families_.find(name);
  return it == families_.end() ? nullptr : it->second.get();
}

const Family* Registry::find(const std::string& name) const {
  std::lock_guard lock(mutex_);
  auto it = families_.find(name);
  return it == families_.end() ? nullptr : it->second.get();
}

std::string Registry::prometheus_text() const {
  std::string out;
  std::lock_guard lock(mutex_);  // lock order: registry, then each family in turn
  for (const auto& [name, family] : families_) family->write_prometheus(out, &derived_);
  return out;
}

void Registry::set_derived_labels(DerivedLabels labels) {
  for (const auto& n : labels.names)
    if (!valid_label_name(n)) throw std::invalid_argument("invalid derived label name '" + n + "'");
  std::lock_guard lock(mutex_);
  derived_ = std::move(labels);
}

std::map<std::string, SeriesValue> Registry::values_where(const std::string& prefix, const std::string& label,
                                                          const std::string& value) const {
  std::map<std::string, SeriesValue> out;
  std::lock_guard lock(mutex_);
  for (const auto& [name, family] : families_) {
    if (name.rfind(prefix, 0) != 0) continue;
    const auto& names = family->label_names();
    auto key = std::find(names.begin(), names.end(), label);
    if (key == names.end()) continue;
    const size_t k = size_t(key - names.begin());
    std::vector<std::string> others;
    for (size_t i = 0; i < names.size(); ++i)
      if (i != k) others.push_back(names[i]);
    std::lock_guard flock(family->mutex_);
    for (const auto& [values, s] : family->series_) {
      if (values[k] != value) continue;
      std::vector<std::string> rest;
      for (size_t i = 0; i < values.size(); ++i)
        if (i != k) rest.push_back(values[i]);
      std::string labels;
      write_labels(labels, others, rest);
      if (family->type() == Type::histogram) {
        out[name + "_count" + labels] = {double(s.count), true};
        out[name + "_sum" + labels] = {s.sum, true};
      } else {
        out[name + labels] = {s.value, family->type() == Type::counter};
      }
    }
  }
  return out;
}

}  // namespace tokenhost::metrics
