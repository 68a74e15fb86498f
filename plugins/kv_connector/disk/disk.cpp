// kv_connector.disk: a KV tier in a folder. Each block is one file, <folder>/<namespace>/<key>.kvb (both
// as 16 hex digits): a 64-byte header (magic, format version, namespace, key, the KV shape's
// fingerprint, the image's bytes, its CRC-32) and the block's image (the SDK's plugin_kv_blocks.hpp, so
// a file loads into any pool of the same shape). Files are written to a temporary name and renamed: a
// crash leaves a whole file or none. At create() the folder is scanned (temporary files removed) and
// its files become the index, oldest modification first in the least-recently-used order, so a server
// restarted on the folder finds what it wrote before; a block another instance wrote there since (an
// engine beside it, another process) is found when a prompt asks for it. The folder stays under
// max_bytes: the least
// recently used files go first. A load checks every header field and the CRC before it writes a block
// into the pool; a file that fails is refused by name (the completion's message), removed, and it and
// the blocks after it are left for the host to compute.
//
// save() copies the blocks into images during the call; a thread of the instance writes the files.
// load() and the reads run on that thread too, one job at a time in arrival order; poll() hands back
// what finished.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_kv_blocks.hpp>
#include <tokenhost/plugin_kv_connector.hpp>

#include <zlib.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
namespace fs = std::filesystem;

constexpr const char* kId = TH_PLUGIN_ID;
constexpr char kMagic[8] = {'T', 'H', 'K', 'V', 'B', 'L', 'K', '1'};
constexpr uint32_t kFormat = 1;

// The file header, little-endian as the machine writes it (files do not move between byte orders).
struct Header {
  char magic[8];
  uint32_t format;
  uint32_t header_bytes;
  uint64_t namespace_id;
  uint64_t key;
  uint64_t shape;
  uint64_t payload_bytes;
  uint32_t crc;
  uint32_t reserved;
};
static_assert(sizeof(Header) == 56, "the header's layout is the file format");
constexpr size_t kHeaderBytes = 64;  // the header, padded

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool parse_hex(const std::string& s, uint64_t& out) {
  if (s.size() != 16) return false;
  out = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    out = out << 4 | uint64_t(d);
  }
  return true;
}

uint32_t crc_of(const void* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = uInt(std::min<size_t>(n, 1u << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return uint32_t(crc);
}

// ${NAME} and ${NAME:-fallback} from the environment; an unset NAME without a fallback is an error.
std::string expand(const std::string& value) {
  std::string out;
  for (size_t i = 0; i < value.size();) {
    if (value.compare(i, 2, "${") != 0) {
      out += value[i++];
      continue;
    }
    const size_t end = value.find('}', i);
    if (end == std::string::npos) throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": folder '" + value + "' has an unclosed ${");
    std::string name = value.substr(i + 2, end - i - 2), fallback;
    const size_t dash = name.find(":-");
    const bool has_fallback = dash != std::string::npos;
    if (has_fallback) fallback = name.substr(dash + 2), name.resize(dash);
    const char* v = std::getenv(name.c_str());
    if (v != nullptr && *v != '\0') out += v;
    else if (has_fallback) out += fallback;
    else throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": folder '" + value + "' names ${" + name + "}, which is not set");
    i = end + 1;
  }
  return out;
}

using Id = sdk::KvBlockId;

class Disk {
 public:
  explicit Disk(const th_create_args& args) : ctx_(args.host_ctx) {
    const sdk::Config config(args.config);
    folder_ = expand(config.require_string("folder"));
    if (folder_.empty()) throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": folder is empty");
    max_bytes_ = uint64_t(config.require_int("max_bytes"));
    std::error_code ec;
    fs::create_directories(folder_, ec);
    if (ec) throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": cannot create folder " + folder_ + ": " + ec.message());
    scan();
    thread_ = std::thread([this] { run(); });
  }

  ~Disk() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();  // a load being written ends first: the host frees its blocks after destroy()
  }

  // Keys the index lacks are looked for in the folder too (one stat, at the first missing key): a block
  // another instance on the same folder wrote (another engine of the process, another process) is
  // found and joins this index.
  uint32_t contains(uint64_t ns, const uint64_t* keys, uint32_t n) {
    std::lock_guard lock(mutex_);
    uint32_t i = 0;
    for (; i < n; ++i) {
      const Id id{ns, keys[i]};
      if (index_.contains(id)) continue;
      std::error_code ec;
      const fs::path path = file_of(id);
      if (!fs::is_regular_file(path, ec)) break;
      const uintmax_t bytes = fs::file_size(path, ec);
      if (ec) break;
      index_.add(id, uint64_t(bytes), true);
      evict();
      if (!index_.contains(id)) break;  // evicted at once: over the cap by itself
    }
    return i;
  }

  void save(const th_kv_transfer& t) {
    sdk::check_kv_transfer(t, kId, "save");
    Job job;
    job.load = false;
    job.ticket = t.ticket;
    job.ns = t.namespace_id;
    job.shape = sdk::kv_block_shape(*t.layout);
    const size_t bytes = sdk::kv_block_image_bytes(job.shape);
    {
      std::lock_guard lock(mutex_);
      for (uint32_t i = 0; i < t.n_blocks; ++i)
        if (!index_.contains(Id{t.namespace_id, t.keys[i]}) && !writing_.count(Id{t.namespace_id, t.keys[i]})) job.keys.push_back(t.keys[i]);
    }
    job.n_given = t.n_blocks;
    job.images.resize(job.keys.size() * bytes);
    // The blocks are read now: the host may reuse them once save() returns.
    for (size_t k = 0, i = 0; i < t.n_blocks; ++i) {
      if (k < job.keys.size() && job.keys[k] == t.keys[i]) sdk::save_kv_block(*t.layout, t.blocks[i], job.images.data() + k++ * bytes);
    }
    std::lock_guard lock(mutex_);
    for (uint64_t key : job.keys) writing_.insert(Id{t.namespace_id, key});
    jobs_.push_back(std::move(job));
    wake_.notify_one();
  }

  void load(const th_kv_transfer& t) {
    sdk::check_kv_transfer(t, kId, "load");
    Job job;
    job.load = true;
    job.ticket = t.ticket;
    job.ns = t.namespace_id;
    job.shape = sdk::kv_block_shape(*t.layout);
    job.layout = *t.layout;  // its memory stays where it is while the engine runs (th_kvcache.h)
    job.keys.assign(t.keys, t.keys + t.n_blocks);
    job.blocks.assign(t.blocks, t.blocks + t.n_blocks);
    job.n_given = t.n_blocks;
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    wake_.notify_one();
  }

  void poll(th_kv_completion* out, uint32_t capacity, uint32_t* n_out) { done_.poll(out, capacity, n_out); }

  void cancel(uint64_t ticket) { cancelled_.cancel(ticket); }

  void stats(th_kv_connector_stats* out) {
    th_kv_connector_stats s{};
    {
      std::lock_guard lock(mutex_);
      s.stored_blocks = index_.size();
      s.stored_bytes = index_.bytes();
      s.capacity_bytes = max_bytes_;
      s.evicted_blocks = evicted_;
      s.refused_blocks = refused_;
    }
    sdk::write_kv_connector_stats(s, out);
  }

 private:
  struct Job {
    bool load = false;
    uint64_t ticket = 0, ns = 0;
    sdk::KvBlockShape shape;
    th_kv_layout layout{};
    std::vector<uint64_t> keys;
    std::vector<int32_t> blocks;  // load: where each key's block goes
    std::vector<char> images;     // save: each key's image, in order
    uint32_t n_given = 0;         // blocks the host handed over (a save skips those already stored)
  };
  struct Done {
    uint64_t ticket;
    th_status status;
    uint32_t n_done;
    std::string message;
  };

  fs::path file_of(const Id& id) const { return fs::path(folder_) / hex(id.ns) / (hex(id.key) + ".kvb"); }

  // The folder's files as the index, oldest first; temporary files (a write cut short) removed.
  void scan() {
    std::vector<std::pair<fs::file_time_type, std::pair<Id, uint64_t>>> found;
    std::error_code ec;
    for (const auto& dir : fs::directory_iterator(folder_, ec)) {
      uint64_t ns = 0;
      if (!dir.is_directory() || !parse_hex(dir.path().filename().string(), ns)) continue;
      for (const auto& f : fs::directory_iterator(dir.path(), ec)) {
        const std::string name = f.path().filename().string();
        if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) {
          fs::remove(f.path(), ec);
          continue;
        }
        uint64_t key = 0;
        if (name.size() != 20 || name.compare(16, 4, ".kvb") != 0 || !parse_hex(name.substr(0, 16), key)) continue;
        found.push_back({f.last_write_time(ec), {Id{ns, key}, uint64_t(f.file_size(ec))}});
      }
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [time, entry] : found) index_.add(entry.first, entry.second, true);
    evict();
    if (!found.empty())
      sdk::log(ctx_, TH_LOG_INFO, std::string(kId) + ": " + folder_ + " holds " + std::to_string(index_.size()) + " blocks (" +
                                      std::to_string(index_.bytes()) + " bytes) from before");
  }

  // Under mutex_: the least recently used files go until the folder fits.
  void evict() {
    for (const auto& [victim, unused] : index_.evict_over(max_bytes_)) {
      std::error_code ec;
      fs::remove(file_of(victim), ec);
      ++evicted_;
    }
  }

  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (stopping_) return;  // queued jobs are dropped: a load not started wrote nothing
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      Done d = job.load ? read(job) : write(job);
      cancelled_.forget(job.ticket);
      done_.push(d.ticket, d.status, d.n_done, std::move(d.message));
    }
  }

  Done write(Job& job) {
    const size_t bytes = sdk::kv_block_image_bytes(job.shape);
    const uint64_t shape = sdk::kv_shape_fingerprint(job.shape);
    std::error_code ec;
    fs::create_directories(fs::path(folder_) / hex(job.ns), ec);
    uint32_t written = 0;
    std::string error;
    for (size_t k = 0; k < job.keys.size(); ++k) {
      const Id id{job.ns, job.keys[k]};
      const char* image = job.images.data() + k * bytes;
      Header h{};
      std::memcpy(h.magic, kMagic, sizeof kMagic);
      h.format = kFormat;
      h.header_bytes = kHeaderBytes;
      h.namespace_id = job.ns;
      h.key = id.key;
      h.shape = shape;
      h.payload_bytes = bytes;
      h.crc = crc_of(image, bytes);
      char head[kHeaderBytes] = {};
      std::memcpy(head, &h, sizeof h);
      const fs::path path = file_of(id), tmp = path.string() + ".tmp";
      {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        f.write(head, kHeaderBytes);
        f.write(image, std::streamsize(bytes));
        if (!f) error = "cannot write " + tmp.string();
      }
      if (error.empty()) {
        fs::rename(tmp, path, ec);
        if (ec) error = "cannot rename " + tmp.string() + ": " + ec.message();
      }
      std::lock_guard lock(mutex_);
      writing_.erase(id);
      if (!error.empty()) {
        fs::remove(tmp, ec);
        for (size_t j = k + 1; j < job.keys.size(); ++j) writing_.erase(Id{job.ns, job.keys[j]});
        break;
      }
      index_.add(id, kHeaderBytes + bytes, true);
      ++written;
      evict();
    }
    const uint32_t skipped = job.n_given - uint32_t(job.keys.size());  // already stored: they count
    if (!error.empty()) return Done{job.ticket, TH_ERR_INTERNAL, skipped + written, std::string(kId) + ": " + error};
    return Done{job.ticket, TH_OK, job.n_given, ""};
  }

  Done read(Job& job) {
    const size_t bytes = sdk::kv_block_image_bytes(job.shape);
    const uint64_t shape = sdk::kv_shape_fingerprint(job.shape);
    std::vector<char> file(kHeaderBytes + bytes);
    for (size_t k = 0; k < job.keys.size(); ++k) {
      if (cancelled_.cancelled(job.ticket)) return Done{job.ticket, TH_ERR_NOT_FOUND, uint32_t(k), std::string(kId) + ": load cancelled"};
      const Id id{job.ns, job.keys[k]};
      const fs::path path = file_of(id);
      std::string why;
      std::ifstream f(path, std::ios::binary);
      if (!f) why = "is missing";
      else {
        f.read(file.data(), std::streamsize(file.size()));
        const bool whole = f.gcount() == std::streamsize(file.size());
        const bool longer = whole && f.peek() != std::char_traits<char>::eof();
        Header h{};
        std::memcpy(&h, file.data(), sizeof h);
        if (!whole) why = "is truncated (" + std::to_string(f.gcount()) + " of " + std::to_string(file.size()) + " bytes)";
        else if (longer) why = "is longer than a block of this shape";
        else if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.format != kFormat || h.header_bytes != kHeaderBytes)
          why = "has no block header of format " + std::to_string(kFormat);
        else if (h.namespace_id != job.ns || h.key != id.key) why = "holds another block than its name says";
        else if (h.shape != shape || h.payload_bytes != bytes) why = "holds a block of another KV shape";
        else if (h.crc != crc_of(file.data() + kHeaderBytes, bytes)) why = "fails its checksum";
      }
      if (!why.empty()) {
        std::lock_guard lock(mutex_);
        if (index_.erase(id)) ++refused_;
        std::error_code ec;
        fs::remove(path, ec);
        return Done{job.ticket, TH_ERR_NOT_FOUND, uint32_t(k), std::string(kId) + ": refused " + path.string() + ": it " + why};
      }
      sdk::load_kv_block(job.layout, job.blocks[k], file.data() + kHeaderBytes);
      std::lock_guard lock(mutex_);
      index_.touch(id);
    }
    return Done{job.ticket, TH_OK, uint32_t(job.keys.size()), ""};
  }

  th_host_ctx* ctx_;
  std::string folder_;
  uint64_t max_bytes_ = 0;
  sdk::KvCompletions done_;
  sdk::KvCancellations cancelled_;
  std::mutex mutex_;  // everything below
  std::condition_variable wake_;
  std::deque<Job> jobs_;
  sdk::KvLru<bool> index_;  // the folder's files (the value is unused)
  std::unordered_set<Id, sdk::KvBlockIdHash> writing_;  // keys a queued save will write: not saved twice
  uint64_t evicted_ = 0, refused_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&]() -> th_status {
    sdk::check_host_memory_device(query, kId);
    if (query->config != nullptr) expand(sdk::Config(query->config).require_string("folder"));  // an unset variable is named now
    return TH_OK;
  });
}

const th_kv_connector_vtable kVtable = sdk::kv_connector_vtable<Disk>(check);

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_KV_CONNECTOR, kId, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
