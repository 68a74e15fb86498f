// tokenhost metrics: counters, gauges and histograms with labels, exposed in the Prometheus text
// exposition format 0.0.4.
//
// A Registry owns metric families. A Family is one metric name with its help text, type and label
// names; it holds one series per distinct tuple of label values. Families stay at a stable address
// for the lifetime of their registry, so callers may keep Family* / Family& and update them from any
// thread: every member of Family and Registry is thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tokenhost::metrics {

enum class Type { counter, gauge, histogram };

// "counter", "gauge" or "histogram".
const char* type_name(Type type);

// The default histogram upper bounds (seconds-oriented, as in the Prometheus client libraries).
const std::vector<double>& default_buckets();

// Formats a sample value as the exposition format expects: integral values without a decimal point,
// other finite values as the shortest string that round-trips, and "+Inf", "-Inf", "NaN".
std::string format_value(double value);

// Escaping used by the exposition format. HELP text escapes backslash and newline; label values also
// escape the double quote.
std::string escape_help(const std::string& help);
std::string escape_label_value(const std::string& value);

// Name checks: metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* and
// must not start with "__" (reserved for internal use).
bool valid_metric_name(const std::string& name);
bool valid_label_name(const std::string& name);

class Registry;

// One series' value as values_where() reads it: cumulative for counters and for histograms' _count and
// _sum (an interval's share is a difference), not for gauges.
struct SeriesValue {
  double value = 0;
  bool cumulative = false;
};

// Labels that the exposition adds to every family carrying the label `key` (see
// Registry::set_derived_labels).
struct DerivedLabels {
  std::string key;
  std::vector<std::string> names;
  std::map<std::string, std::vector<std::string>> values_by_key;  // key's value -> one value per name
};

class Family {
 public:
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  Type type() const { return type_; }
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Histogram upper bounds, ascending, without the implicit +Inf bucket; empty for counters/gauges.
  const std::vector<double>& buckets() const { return buckets_; }

  // Every call taking label_values throws std::invalid_argument naming the family when
  // label_values.size() != label_names().size(), or when the call does not fit the family's type.

  // Counter: adds delta, which must be >= 0 (NaN is rejected too). Gauge: adds delta (may be < 0).
  void add(const std::vector<std::string>& label_values, double delta);
  // Gauge only: sets the value.
  void set(const std::vector<std::string>& label_values, double value);
  // Histogram only: records one observation. NaN lands in the +Inf bucket only (and makes the sum NaN).
  void observe(const std::vector<std::string>& label_values, double value);

  // Counter/gauge: the current value, 0 if the series does not exist.
  double value(const std::vector<std::string>& label_values) const;
  // Histogram: number of observations and their sum; 0 if the series does not exist.
  uint64_t count(const std::vector<std::string>& label_values) const;
  double sum(const std::vector<std::string>& label_values) const;
  // Histogram: cumulative counts, one per upper bound in buckets() and a last one for +Inf (equal to
  // count()). All zero if the series does not exist.
  std::vector<uint64_t> bucket_counts(const std::vector<std::string>& label_values) const;

  // Drops one series (for example when an engine is removed). No effect if it does not exist.
  void remove(const std::vector<std::string>& label_values);
  // Number of series currently held.
  std::size_t series_count() const;

  // Appends this family's HELP, TYPE and sample lines to out; with `derived`, each series of a family
  // that has derived->key (and none of derived->names) also carries derived->names.
  void write_prometheus(std::string& out, const DerivedLabels* derived = nullptr) const;

 private:
  friend class Registry;

  struct Series {
    double value = 0;                   // counter / gauge
    std::vector<uint64_t> per_bucket;   // histogram: non-cumulative, size buckets_.size() + 1
    uint64_t count = 0;                 // histogram
    double sum = 0;                     // histogram
  };

  Family(Type type, std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> buckets);

  void check_arity(const std::vector<std::string>& label_values) const;
  void require(Type wanted, const char* operation) const;
  [[noreturn]] void fail(const std::string& what) const;
  Series& series_locked(const std::vector<std::string>& label_values);
  const Series* find_locked(const std::vector<std::string>& label_values) const;

  const Type type_;
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const std::vector<double> buckets_;

  mutable std::mutex mutex_;
  std::map<std::vector<std::string>, Series> series_;  // sorted by label values
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Returns the family called name, creating it. Asking again for an existing name returns the same
  // family when type, label names and (for histograms) buckets match; otherwise throws
  // std::invalid_argument saying what differs. The help text of the first registration is kept.
  // Throws std::invalid_argument for a bad metric or label name, a duplicate label name, the label
  // "le" on a histogram, buckets on a non-histogram, or buckets that are not finite and strictly
  // ascending. Empty buckets for a histogram means default_buckets().
  Family& family(Type type, const std::string& name, const std::string& help,
                 std::vector<std::string> label_names = {}, std::vector<double> buckets = {});

  // The family called name, or nullptr.
  Family* find(const std::string& name);
  const Family* find(const std::string& name) const;

  // All families in the Prometheus text exposition format 0.0.4, families in name order, series in
  // label-value order. Families without series still print their HELP and TYPE lines.
  std::string prometheus_text() const;

  // From now on, the exposition adds labels `names` to every series of a family with label `key` (and
  // none of `names`), valued values_by_key[its key value], or "" for a key value not in the map. The
  // series themselves are unchanged: this labels what they belong to now (an engine's A/B arm).
  // Replaces any earlier setting.
  void set_derived_labels(DerivedLabels labels);

  // Every series of the families named `prefix`* whose label `label` is `value`, keyed
  // "name{other labels}" in exposition syntax (histograms as name_count and name_sum).
  std::map<std::string, SeriesValue> values_where(const std::string& prefix, const std::string& label,
                                                  const std::string& value) const;

 private:
  DerivedLabels derived_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Family>> families_;  // unique_ptr: stable addresses
};

}  // namespace tokenhost::metrics
