// tokenhost plugin SDK: a thin C++ helper for plugin authors (header only, C++17).
//
// It adds no ABI of its own: everything still crosses the boundary through the C structs of
// tokenhost.h. What it gives:
//   - sdk::host(): the host API table, stored by TOKENHOST_PLUGIN_ENTRY;
//   - sdk::Error and sdk::guard(): throw inside a plugin, return a th_status + message at the boundary;
//   - sdk::Config: typed configuration look-up with defaults;
//   - sdk::create_instance<T> / destroy_instance<T>: a C++ class as th_instance (RAII);
//   - sdk::log(): logging into the host;
//   - sdk::parallel_for(): work split over the host's compute threads, exceptions carried back.
// Build plugins with -fno-gnu-unique (tokenhost_add_plugin does): the inline variable below must not
// become a GNU unique symbol, or the library could never be unloaded.
#ifndef TOKENHOST_PLUGIN_HPP
#define TOKENHOST_PLUGIN_HPP

#include <tokenhost/tokenhost.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

namespace tokenhost::sdk {

// The host API table given to the entry point. Valid until the library is closed.
inline const th_host_api* g_host = nullptr;
inline const th_host_api& host() { return *g_host; }

// An error to report through the boundary: guard() turns it into its status and message.
class Error : public std::exception {
 public:
  Error(th_status status, std::string message) : status_(status), message_(std::move(message)) {}
  th_status status() const noexcept { return status_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  th_status status_;
  std::string message_;
};

inline void set_error(th_error* err, const std::string& message) {
  if (g_host != nullptr) g_host->error_set(err, message.c_str());
}

// Runs f (returning th_status or void) and converts every exception into a status and a message, so
// that nothing is thrown across the C boundary.
template <class F>
th_status guard(th_error* err, F&& f) noexcept {
  try {
    if constexpr (std::is_same_v<decltype(f()), void>) {
      f();
      return TH_OK;
    } else {
      return f();
    }
  } catch (const Error& e) {
    set_error(err, e.what());
    return e.status();
  } catch (const std::bad_alloc&) {
    set_error(err, "out of memory");
    return TH_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(err, e.what());
    return TH_ERR_INTERNAL;
  } catch (...) {
    set_error(err, "unknown exception");
    return TH_ERR_INTERNAL;
  }
}

inline void log(th_host_ctx* ctx, th_log_level level, const std::string& message) {
  if (g_host != nullptr) g_host->log(ctx, level, message.c_str());
}

// Runs f(begin, end) over [0, n) on the host's compute threads (th_host_api.parallel_for: pieces of
// grain indices, at most max_threads threads, 0 meaning defaults). An exception thrown by f stops the
// pieces not yet started and is rethrown here once the others are done (the first one, if several).
template <class F>
void parallel_for(th_host_ctx* ctx, size_t n, size_t grain, uint32_t max_threads, F&& f) {
  struct Call {
    explicit Call(F& fn) : f(fn) {}
    F& f;
    std::atomic<bool> failed{false};
    std::mutex mutex;
    std::exception_ptr error;
  } call(f);
  host().parallel_for(
      ctx, n, grain, max_threads,
      [](void* arg, size_t begin, size_t end) {
        Call& c = *static_cast<Call*>(arg);
        if (c.failed.load(std::memory_order_relaxed)) return;
        try {
          c.f(begin, end);
        } catch (...) {
          std::lock_guard<std::mutex> lock(c.mutex);
          if (!c.error) c.error = std::current_exception();
          c.failed.store(true, std::memory_order_relaxed);
        }
      },
      &call);
  if (call.error) std::rethrow_exception(call.error);
}

// Typed, read-only view of the plugin's configuration. The get_* functions return the default when the
// key is absent and throw Error(TH_ERR_INVALID_ARGUMENT) when it has another type.
class Config {
 public:
  explicit Config(const th_config* config) : config_(config) {}

  int64_t get_int(const char* key, int64_t fallback) const {
    int64_t v = 0;
    return pick(host().config_get_int(config_, key, &v), key, "an integer") ? v : fallback;
  }
  double get_double(const char* key, double fallback) const {
    double v = 0;
    return pick(host().config_get_double(config_, key, &v), key, "a number") ? v : fallback;
  }
  bool get_bool(const char* key, bool fallback) const {
    int32_t v = 0;
    return pick(host().config_get_bool(config_, key, &v), key, "a boolean") ? v != 0 : fallback;
  }
  std::string get_string(const char* key, const std::string& fallback) const {
    size_t needed = 0;
    th_status s = host().config_get_string(config_, key, nullptr, 0, &needed);
    if (s == TH_ERR_NOT_FOUND) return fallback;
    if (s != TH_OK && s != TH_ERR_RESOURCE_EXHAUSTED) pick(s, key, "a string");
    std::string out(needed, '\0');
    s = host().config_get_string(config_, key, out.data(), out.size(), &needed);
    pick(s, key, "a string");
    out.resize(needed > 0 ? needed - 1 : 0);
    return out;
  }
  // The value of a key that plugin.toml declares. The host merges the declared default and checks the
  // declared type and range before check() and create() see the table, so the value is always there:
  // read declared keys with these, and the default and range live in plugin.toml alone. Throws
  // Error(TH_ERR_INVALID_ARGUMENT) naming the key when it is absent (a key plugin.toml does not
  // declare) or of another type.
  int64_t require_int(const char* key) const {
    int64_t v = 0;
    require(host().config_get_int(config_, key, &v), key, "an integer");
    return v;
  }
  double require_double(const char* key) const {
    double v = 0;
    require(host().config_get_double(config_, key, &v), key, "a number");
    return v;
  }
  bool require_bool(const char* key) const {
    int32_t v = 0;
    require(host().config_get_bool(config_, key, &v), key, "a boolean");
    return v != 0;
  }
  std::string require_string(const char* key) const {
    size_t needed = 0;
    const th_status s = host().config_get_string(config_, key, nullptr, 0, &needed);
    if (s != TH_ERR_RESOURCE_EXHAUSTED) require(s, key, "a string");
    return get_string(key, "");
  }
  // An integer that must lie in [lo, hi].
  int64_t get_int_in(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
    int64_t v = get_int(key, fallback);
    if (v < lo || v > hi) {
      throw Error(TH_ERR_INVALID_ARGUMENT, std::string("config '") + key + "' = " + std::to_string(v) +
                                               " is out of range [" + std::to_string(lo) + ", " +
                                               std::to_string(hi) + "]");
    }
    return v;
  }

 private:
  static void require(th_status s, const char* key, const char* what) {
    if (s == TH_ERR_NOT_FOUND) {
      throw Error(TH_ERR_INVALID_ARGUMENT, std::string("config '") + key +
                                               "' is absent: plugin.toml must declare it (the host then gives its default)");
    }
    pick(s, key, what);
  }
  static bool pick(th_status s, const char* key, const char* what) {
    if (s == TH_OK) return true;
    if (s == TH_ERR_NOT_FOUND) return false;
    throw Error(TH_ERR_INVALID_ARGUMENT, std::string("config '") + key + "' must be " + what);
  }
  const th_config* config_;
};

// A C++ class Impl as th_instance: Impl(const th_create_args&) may throw; its destructor frees all.
// An Impl constructible from (const th_create_args&, th_error*) is given create()'s err too, to pass to
// host calls it makes while it is built (their messages then reach the error create() reports).
template <class Impl>
Impl& self(th_instance* instance) {
  return *reinterpret_cast<Impl*>(instance);
}

template <class Impl>
th_status create_instance(const th_create_args* args, th_instance** out, th_error* err) noexcept {
  *out = nullptr;
  return guard(err, [&] {
    if constexpr (std::is_constructible_v<Impl, const th_create_args&, th_error*>)
      *out = reinterpret_cast<th_instance*>(new Impl(*args, err));
    else
      *out = reinterpret_cast<th_instance*>(new Impl(*args));
  });
}

template <class Impl>
void destroy_instance(th_instance* instance) noexcept {
  delete reinterpret_cast<Impl*>(instance);
}

}  // namespace tokenhost::sdk

// Defines the library's entry symbol returning `descriptor` (a th_plugin_descriptor with static
// storage). Refuses a host whose API table is older than the members this SDK calls.
#define TOKENHOST_PLUGIN_ENTRY(descriptor)                                                         \
  extern "C" TH_PLUGIN_EXPORT const th_plugin_descriptor* tokenhost_plugin_entry(                  \
      const th_host_api* host_api) {                                                               \
    if (host_api == nullptr) return nullptr;                                                       \
    if (host_api->struct_size < sizeof(th_host_api)) {                                             \
      host_api->log(nullptr, TH_LOG_ERROR, "plugin built against a newer host API table; refused"); \
      return nullptr;                                                                              \
    }                                                                                              \
    ::tokenhost::sdk::g_host = host_api;                                                           \
    return &(descriptor);                                                                          \
  }

#endif  // TOKENHOST_PLUGIN_HPP
