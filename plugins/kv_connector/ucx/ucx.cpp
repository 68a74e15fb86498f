// kv_connector.ucx: KV blocks between engines and processes over UCX (the transport NIXL uses): shared
// memory and TCP on one machine, RDMA where the hardware has it (UCX picks; `tls` or UCX_TLS narrows).
//
// Push, not pull. Every instance has a memory tier of block images (bounded by max_bytes, least recently
// used dropped first) where the blocks it receives on `listen` go. save() sends the blocks to every
// peer named in `peers` (host:port of another instance's `listen`) and completes when every peer has
// stored them and said so, so that when a prefill engine's save is reported the decode engine it sent
// to can already load them (disaggregation, router.disaggregated); an instance without peers stores
// its saves in its own tier (a memory tier for its engine; stack it above a sender for both).
// contains() and load() read the memory tier alone: they never wait on the network.
//
// On the wire (UCX active messages; a peer is trusted as far as sizes and shapes are checked, so listen
// on loopback or a private fabric: anyone who reaches the port can fill the tier):
//   BLOCKS  header {magic, version, message id, namespace, shape fingerprint, image bytes, n}, data: n
//           keys (8 bytes each) then n images (the SDK's plugin_kv_blocks.hpp format);
//   ACK     header {magic, version, message id, blocks stored, status, peer}, to the sender's endpoint.
// A message whose header or length disagrees is refused (counted in refused_blocks) and answered with a
// failed ACK. A load checks each image's shape fingerprint and size against the pool before writing it.
//
// Threads: one runs the UCX worker (the listener, the peers' endpoints, sends, receives, acks); it
// sleeps on the worker's event file descriptor and an eventfd the host's calls ring. Another writes
// loads into the pool, one at a time in arrival order.
#include <tokenhost/plugin.hpp>
#include <tokenhost/plugin_kv_blocks.hpp>
#include <tokenhost/plugin_kv_connector.hpp>
#include <tokenhost/plugin_kv_push.hpp>

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace sdk = tokenhost::sdk;
using Clock = std::chrono::steady_clock;

constexpr const char* kId = TH_PLUGIN_ID;
constexpr uint16_t kAmBlocks = 0x4b31;  // active message ids of this connector
constexpr uint16_t kAmAck = 0x4b32;
// A save goes as messages of at most this many bytes (a block at least): UCX's eager protocol moves
// a few megabytes at GB/s and a message of tens of megabytes at a tenth of that (bench/RESULTS.md), and
// the peer stores each part as it comes.
constexpr size_t kMessageBytes = size_t(4) << 20;

std::string ucx_error(const std::string& what, ucs_status_t s) {
  return std::string(kId) + ": " + what + ": " + ucs_status_string(s);
}

// "host:port" -> its first IPv4 or IPv6 address.
sockaddr_storage resolve(const std::string& address, const char* key) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": " + key + " '" + address + "' is not host:port");
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0 || found == nullptr)
    throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": " + key + " '" + address + "': " + gai_strerror(rc));
  sockaddr_storage out{};
  std::memcpy(&out, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  return out;
}

socklen_t length_of(const sockaddr_storage& a) { return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in); }

std::string address_text(const sockaddr_storage& a) {
  char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
  getnameinfo(reinterpret_cast<const sockaddr*>(&a), length_of(a), host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
  return std::string(host) + ":" + port;
}

class Ucx : public sdk::KvPushConnector {
 public:
  explicit Ucx(const th_create_args& args)
      : KvPushConnector(kId, uint64_t(sdk::Config(args.config).require_int("max_bytes"))), ctx_(args.host_ctx) {
    const sdk::Config config(args.config);
    timeout_ = std::chrono::milliseconds(config.require_int("timeout_ms"));
    const std::string listen = config.require_string("listen");
    for (const std::string& p : sdk::split_peer_list(config.require_string("peers"))) peers_.push_back(Peer{p, resolve(p, "peer"), nullptr, false});
    const std::string tls = config.require_string("tls");
    const std::string protocol = config.require_string("protocol");
    if (protocol == "eager") eager_ = UCP_AM_SEND_FLAG_EAGER;
    else if (protocol == "rendezvous") eager_ = UCP_AM_SEND_FLAG_RNDV;
    else if (protocol != "auto")
      throw sdk::Error(TH_ERR_INVALID_ARGUMENT, std::string(kId) + ": protocol '" + protocol + "' is not eager, rendezvous or auto");
    if (!listen.empty() || !peers_.empty()) start_ucx(listen, tls);
  }

  // The network stops first, then the tier (its loads thread: a load being written ends before the
  // host frees its blocks).
  ~Ucx() {
    if (worker_ != nullptr) {
      net_stopping_ = true;
      ring();
      net_thread_.join();
      stop_ucx();
    }
  }

  // The blocks are read now (the host may reuse them once save() returns) into parts of at most
  // kMessageBytes: messages to the peers, which the network thread sends.
  void save(const th_kv_transfer& t) {
    sdk::KvPacked packed;
    if (!pack_or_keep(t, !peers_.empty(), kMessageBytes, packed)) return;
    {
      std::lock_guard lock(net_mutex_);
      outgoing_.push_back(Outgoing{t.ticket, t.n_blocks, t.namespace_id, std::move(packed)});
    }
    ring();
  }

 private:
  struct Peer {
    std::string name;  // as configured
    sockaddr_storage address;
    ucp_ep_h ep;
    bool failed;  // its endpoint reported an error: closed and reopened at the next send
  };
  struct Outgoing {  // a save on its way to the peers
    uint64_t ticket = 0;
    uint32_t n_blocks = 0;
    uint64_t ns = 0;
    sdk::KvPacked packed;
  };
  struct Send {  // what a UCX send needs until its completion
    sdk::KvBlocksHeader blocks{};
    sdk::KvAckHeader ack{};
    std::shared_ptr<const sdk::KvBuffer> data;
  };
  struct Incoming {  // a received rendezvous message being fetched
    Ucx* self = nullptr;
    sdk::KvBlocksHeader header{};
    std::shared_ptr<sdk::KvBuffer> data;
    ucp_ep_h reply = nullptr;
  };

  // ---- the UCX side: everything below runs on net_thread_ once it started ----

  void start_ucx(const std::string& listen, const std::string& tls) {
    ucp_config_t* config = nullptr;
    if (ucs_status_t s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) throw sdk::Error(TH_ERR_INTERNAL, ucx_error("reading UCX's configuration", s));
    if (!tls.empty()) {
      if (ucs_status_t s = ucp_config_modify(config, "TLS", tls.c_str()); s != UCS_OK) {
        ucp_config_release(config);
        throw sdk::Error(TH_ERR_INVALID_ARGUMENT, ucx_error("tls '" + tls + "'", s));
      }
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.name = kId;
    const ucs_status_t s = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (s != UCS_OK) throw sdk::Error(TH_ERR_INTERNAL, ucx_error("ucp_init", s));
    try {
      ucp_worker_params_t wp{};
      wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
      wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // one thread at a time: this constructor, then net_thread_
      check(ucp_worker_create(context_, &wp, &worker_), "ucp_worker_create");
      check(ucp_worker_get_efd(worker_, &worker_fd_), "ucp_worker_get_efd");
      bell_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (bell_ < 0) throw sdk::Error(TH_ERR_INTERNAL, std::string(kId) + ": eventfd: " + std::strerror(errno));
      set_handler(kAmBlocks, &Ucx::blocks_handler);
      set_handler(kAmAck, &Ucx::ack_handler);
      if (!listen.empty()) {
        const sockaddr_storage address = resolve(listen, "listen");
        ucp_listener_params_t lp{};
        lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
        lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&address);
        lp.sockaddr.addrlen = length_of(address);
        lp.conn_handler.cb = &Ucx::on_connection;
        lp.conn_handler.arg = this;
        if (ucs_status_t ls = ucp_listener_create(worker_, &lp, &listener_); ls != UCS_OK)
          throw sdk::Error(TH_ERR_INVALID_ARGUMENT, ucx_error("cannot listen on " + listen, ls));
        ucp_listener_attr_t attr{};
        attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
        listening_ = ucp_listener_query(listener_, &attr) == UCS_OK ? address_text(attr.sockaddr) : listen;
        sdk::log(ctx_, TH_LOG_INFO, std::string(kId) + ": receiving blocks on " + listening_);
      }
    } catch (...) {
      stop_ucx();
      throw;
    }
    net_thread_ = std::thread([this] { run_net(); });
  }

  void stop_ucx() {
    for (Peer& p : peers_) close_ep(p.ep);
    std::vector<ucp_ep_h> endpoints;  // a copy: closing runs callbacks that change the lists
    endpoints.swap(inbound_);
    endpoints.insert(endpoints.end(), closing_.begin(), closing_.end());
    closing_.clear();
    for (ucp_ep_h& ep : endpoints) close_ep(ep);
    if (listener_ != nullptr) ucp_listener_destroy(listener_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
    if (bell_ >= 0) close(bell_);
    listener_ = nullptr, worker_ = nullptr, context_ = nullptr, bell_ = -1;
  }

  void check(ucs_status_t s, const char* what) {
    if (s != UCS_OK) throw sdk::Error(TH_ERR_INTERNAL, ucx_error(what, s));
  }

  void set_handler(uint16_t id, ucp_am_recv_callback_t cb) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = cb;
    hp.arg = this;
    check(ucp_worker_set_am_recv_handler(worker_, &hp), "ucp_worker_set_am_recv_handler");
  }
  static ucs_status_t blocks_handler(void* arg, const void* h, size_t hl, void* d, size_t l, const ucp_am_recv_param_t* p) {
    return static_cast<Ucx*>(arg)->on_blocks(h, hl, d, l, p);
  }
  static ucs_status_t ack_handler(void* arg, const void* h, size_t hl, void* d, size_t l, const ucp_am_recv_param_t* p) {
    return static_cast<Ucx*>(arg)->on_ack(h, hl, d, l, p);
  }

  // Closes an endpoint, waiting at most a second for its close to finish.
  void close_ep(ucp_ep_h& ep) {
    if (ep == nullptr) return;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(request)) {
      const auto until = Clock::now() + std::chrono::seconds(1);
      while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < until) ucp_worker_progress(worker_);
      ucp_request_free(request);
    }
    ep = nullptr;
  }

  void ring() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(bell_, &one, sizeof one);
  }

  void run_net() {
    while (!net_stopping_) {
      while (ucp_worker_progress(worker_) != 0) {
      }
      send_outgoing();
      fetch_incoming();
      send_acks();
      reopen_failed();
      saves_.expire([this](uint32_t i) { return peers_[i].name; }, timeout_);
      if (ucp_worker_progress(worker_) != 0) continue;
      {
        std::lock_guard lock(net_mutex_);
        if (!outgoing_.empty() || !acks_.empty() || !pending_rndv_.empty()) continue;
      }
      const ucs_status_t armed = ucp_worker_arm(worker_);
      if (armed == UCS_ERR_BUSY) continue;  // events arrived: progress again
      pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {bell_, POLLIN, 0}};
      ::poll(fds, 2, saves_.empty() ? 1000 : 1);  // in-flight saves have deadlines
      uint64_t rung = 0;
      [[maybe_unused]] ssize_t n = read(bell_, &rung, sizeof rung);
    }
  }

  ucp_ep_h peer_ep(Peer& p) {
    if (p.ep != nullptr) return p.ep;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&p.address);
    ep.sockaddr.addrlen = length_of(p.address);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &Ucx::on_peer_error;
    ep.err_handler.arg = this;
    if (ucs_status_t s = ucp_ep_create(worker_, &ep, &p.ep); s != UCS_OK) {
      p.ep = nullptr;
      note_failure(std::string("cannot connect to peer ") + p.name + ": " + ucs_status_string(s));
      return nullptr;
    }
    return p.ep;
  }

  void send_outgoing() {
    std::deque<Outgoing> batch;
    {
      std::lock_guard lock(net_mutex_);
      batch.swap(outgoing_);
    }
    for (Outgoing& out : batch) {
      const uint64_t message = saves_.start(out.ticket, out.n_blocks, timeout_);
      for (uint32_t i = 0; i < peers_.size(); ++i) {
        ucp_ep_h ep = peer_ep(peers_[i]);
        if (ep == nullptr) {
          saves_.fail(message, i, "cannot connect to peer " + peers_[i].name);
          continue;
        }
        saves_.sent(message, i);
        for (const sdk::KvPacked::Part& part : out.packed.parts) {
          auto* send = new Send;
          send->blocks = out.packed.header(out.ns, part);
          send->blocks.message = message;
          send->blocks.peer = i;
          send->data = out.packed.data;
          ucp_request_param_t param{};
          param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
          param.flags = UCP_AM_SEND_FLAG_REPLY | eager_;
          param.cb.send = &Ucx::on_sent;
          param.user_data = send;
          ucs_status_ptr_t r = ucp_am_send_nbx(ep, kAmBlocks, &send->blocks, sizeof send->blocks, send->data->data() + part.offset,
                                               part.bytes(out.packed.image_bytes), &param);
          if (r == nullptr) delete send;  // done already (the data was copied or sent)
          else if (UCS_PTR_IS_ERR(r)) {
            delete send;
            saves_.fail(message, i, "sending to peer " + peers_[i].name + " failed: " + ucs_status_string(UCS_PTR_STATUS(r)));
            break;
          }
        }
      }
      saves_.finish(message);
    }
  }

  static void on_sent(void* request, ucs_status_t, void* user_data) {
    delete static_cast<Send*>(user_data);  // a failure shows as the peer's error or a missing ack
    ucp_request_free(request);
  }

  static void on_peer_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* self = static_cast<Ucx*>(arg);
    for (size_t i = 0; i < self->peers_.size(); ++i) {
      Peer& p = self->peers_[i];
      if (p.ep != ep) continue;
      p.failed = true;
      self->note_failure("peer " + p.name + ": " + ucs_status_string(status));
      self->saves_.fail_peer(uint32_t(i), "peer " + p.name + ": " + ucs_status_string(status));
      return;
    }
    // An inbound endpoint (a peer that sends here) went away: forget it.
    auto it = std::find(self->inbound_.begin(), self->inbound_.end(), ep);
    if (it != self->inbound_.end()) {
      self->inbound_.erase(it);
      self->closing_.push_back(ep);
    }
  }

  void reopen_failed() {
    for (Peer& p : peers_)
      if (p.failed) {
        close_ep(p.ep);
        p.failed = false;
      }
    std::vector<ucp_ep_h> closing;  // a copy: closing runs callbacks that may add to closing_
    closing.swap(closing_);
    for (ucp_ep_h& ep : closing) close_ep(ep);
    saves_.finish_answered();
  }

  void note_failure(const std::string& why) {
    const auto now = Clock::now();
    if (now - last_warning_ < std::chrono::seconds(5)) return;  // one line per few seconds, not one per save
    last_warning_ = now;
    sdk::log(ctx_, TH_LOG_WARN, std::string(kId) + ": " + why);
  }

  static void on_connection(ucp_conn_request_h request, void* arg) {
    auto* self = static_cast<Ucx*>(arg);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.conn_request = request;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &Ucx::on_peer_error;
    ep.err_handler.arg = self;
    ucp_ep_h h = nullptr;
    if (ucp_ep_create(self->worker_, &ep, &h) == UCS_OK) self->inbound_.push_back(h);
  }

  ucs_status_t on_blocks(const void* header, size_t header_length, void* data, size_t length, const ucp_am_recv_param_t* param) {
    ucp_ep_h reply = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : nullptr;
    sdk::KvBlocksHeader h{};
    const std::string why = sdk::kv_blocks_refusal(header, header_length, length, h);
    if (!why.empty()) {
      tier().refused(std::max<uint32_t>(1, h.n_blocks <= sdk::kKvPushMaxBlocks ? h.n_blocks : 1));
      note_failure("refused a message of " + why);
      queue_ack(reply, h, 0, TH_ERR_INVALID_ARGUMENT);
      return UCS_OK;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {  // the data comes when asked for (fetch_incoming)
      auto in = std::make_unique<Incoming>();
      in->self = this;
      in->header = h;
      in->reply = reply;
      in->data = tier().buffers().get(length);
      std::lock_guard lock(net_mutex_);
      pending_rndv_.push_back({std::move(in), data});
      return UCS_INPROGRESS;
    }
    std::shared_ptr<sdk::KvBuffer> copy = tier().buffers().get(length);  // eager data lives only as long as this callback
    std::memcpy(copy->data(), data, length);
    tier().store(h.ns, h.shape, h.image_bytes, h.n_blocks, std::move(copy));
    queue_ack(reply, h, h.n_blocks, TH_OK);
    return UCS_OK;
  }

  void fetch_incoming() {
    std::vector<std::pair<std::unique_ptr<Incoming>, void*>> batch;
    {
      std::lock_guard lock(net_mutex_);
      batch.swap(pending_rndv_);
    }
    for (auto& [in, descriptor] : batch) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.recv_am = &Ucx::on_fetched;
      Incoming* raw = in.release();
      param.user_data = raw;
      ++receiving_;
      ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker_, descriptor, raw->data->data(), raw->data->size, &param);
      if (r == nullptr) received(std::unique_ptr<Incoming>(raw), UCS_OK);
      else if (UCS_PTR_IS_ERR(r)) received(std::unique_ptr<Incoming>(raw), UCS_PTR_STATUS(r));
    }
  }

  static void on_fetched(void* request, ucs_status_t status, size_t, void* user_data) {
    auto* in = static_cast<Incoming*>(user_data);
    in->self->received(std::unique_ptr<Incoming>(in), status);
    ucp_request_free(request);
  }

  void received(std::unique_ptr<Incoming> in, ucs_status_t status) {
    --receiving_;
    const sdk::KvBlocksHeader& h = in->header;
    if (status != UCS_OK) {
      note_failure(std::string("receiving blocks failed: ") + ucs_status_string(status));
      queue_ack(in->reply, h, 0, TH_ERR_INTERNAL);
      return;
    }
    tier().store(h.ns, h.shape, h.image_bytes, h.n_blocks, std::move(in->data));
    queue_ack(in->reply, h, h.n_blocks, TH_OK);
  }

  void queue_ack(ucp_ep_h reply, const sdk::KvBlocksHeader& h, uint32_t stored, th_status status) {
    if (reply == nullptr) return;  // the sender asked for no answer
    std::lock_guard lock(net_mutex_);
    acks_.push_back({reply, sdk::KvAckHeader{sdk::kKvPushMagic, sdk::kKvPushVersion, h.message, stored, int32_t(status), h.peer, 0}});
  }

  void send_acks() {
    std::vector<std::pair<ucp_ep_h, sdk::KvAckHeader>> batch;
    {
      std::lock_guard lock(net_mutex_);
      batch.swap(acks_);
    }
    for (auto& [ep, ack] : batch) {
      if (std::find(closing_.begin(), closing_.end(), ep) != closing_.end()) continue;
      auto* send = new Send;
      send->ack = ack;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.send = &Ucx::on_sent;
      param.user_data = send;
      ucs_status_ptr_t r = ucp_am_send_nbx(ep, kAmAck, &send->ack, sizeof send->ack, nullptr, 0, &param);
      if (r == nullptr || UCS_PTR_IS_ERR(r)) delete send;
    }
  }

  ucs_status_t on_ack(const void* header, size_t header_length, void*, size_t, const ucp_am_recv_param_t*) {
    sdk::KvAckHeader a{};
    if (header_length != sizeof a) return UCS_OK;
    std::memcpy(&a, header, sizeof a);
    if (a.peer < peers_.size()) saves_.ack(a, peers_[a.peer].name);  // a late or foreign one is ignored
    return UCS_OK;
  }

  th_host_ctx* ctx_;
  std::chrono::milliseconds timeout_{5000};
  std::atomic<bool> net_stopping_{false};

  std::mutex net_mutex_;  // what the host's threads and UCX's callbacks hand to net_thread_
  std::deque<Outgoing> outgoing_;
  std::vector<std::pair<ucp_ep_h, sdk::KvAckHeader>> acks_;
  std::vector<std::pair<std::unique_ptr<Incoming>, void*>> pending_rndv_;

  // net_thread_'s own (and create()'s before it starts)
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  int worker_fd_ = -1, bell_ = -1;
  std::string listening_;
  std::vector<Peer> peers_;
  std::vector<ucp_ep_h> inbound_, closing_;
  sdk::KvSavesInFlight saves_{kId, done()};
  uint32_t receiving_ = 0;  // rendezvous receives under way
  uint32_t eager_ = 0;      // the send flag `protocol` names (UCP_AM_SEND_FLAG_EAGER or _RNDV), 0 for UCX's choice
  Clock::time_point last_warning_{};
  std::thread net_thread_;
};

th_status check(const th_check_query* query, th_error* err) {
  return sdk::guard(err, [&]() -> th_status {
    sdk::check_host_memory_device(query, kId);
    if (query->config != nullptr) {  // addresses that do not resolve are named now
      const sdk::Config config(query->config);
      const std::string listen = config.require_string("listen");
      if (!listen.empty()) resolve(listen, "listen");
      for (const std::string& p : sdk::split_peer_list(config.require_string("peers"))) resolve(p, "peer");
    }
    return TH_OK;
  });
}

const th_kv_connector_vtable kVtable = sdk::kv_connector_vtable<Ucx>(check);

const th_plugin_descriptor kDescriptor = {
    sizeof(th_plugin_descriptor), TH_ABI_VERSION_MAJOR, TH_ABI_VERSION_MINOR, TH_KIND_KV_CONNECTOR, kId, TH_PLUGIN_VERSION, &kVtable,
};

}  // namespace

TOKENHOST_PLUGIN_ENTRY(kDescriptor)
