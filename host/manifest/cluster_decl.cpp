#include "manifest/cluster_decl.hpp"

#include <cctype>
#include <filesystem>

#include "util/text.hpp"

namespace tokenhost {
namespace fs = std::filesystem;

std::string node_name_problem(const std::string& name) {
  if (name.empty() || name.size() > 63) return "a node name has 1 to 63 characters";
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'))
      return "a node name has only letters, digits, '.', '_' and '-'";
  if (name == "ca") return "\"ca\" names the cluster's CA files";
  return "";
}

namespace {

// "host:port" with port 1-65535 (a cluster port is never chosen by the system: peers must know it).
void read_address(const TomlReader& r, const toml::node& at, const std::string& text, const std::string& what, std::string& host,
                  uint16_t& port) {
  const auto split = split_host_port(text);
  if (!split || split->port < 1 || split->port > 65535) r.fail(at, what + " must be \"host:port\" (port 1-65535), found \"" + text + "\"");
  host = split->host;
  port = uint16_t(split->port);
}

}  // namespace

ClusterDecl read_cluster(const TomlReader& r, const toml::table& t, const std::string& base) {
  r.check_keys(t, {"node", "certs", "tls", "listen", "workers", "heartbeat_ms", "heartbeat_timeout_ms", "connect_timeout_ms"}, "[cluster]");
  ClusterDecl c;
  c.enabled = true;
  c.node = r.require_string(t, "node", "[cluster]");
  if (auto why = node_name_problem(c.node); !why.empty()) r.fail(*t.get("node"), "[cluster] node \"" + c.node + "\": " + why);
  if (auto tls = r.optional_string(t, "tls", "[cluster]")) {
    if (*tls != kClusterPlaintextWords)
      r.fail(*t.get("tls"), std::string("[cluster] tls: cluster traffic is mutual TLS; to turn it off write exactly tls = \"") +
                                kClusterPlaintextWords + "\"");
    c.tls = false;
  }
  if (auto certs = r.optional_string(t, "certs", "[cluster]")) {
    if (!c.tls) r.fail(*t.get("certs"), "[cluster] certs with tls off: one or the other");
    const fs::path dir = (fs::path(base) / *certs).lexically_normal();
    c.ca = (dir / "ca.pem").string();
    c.certificate = (dir / (c.node + ".pem")).string();
    c.private_key = (dir / (c.node + ".key")).string();
  } else if (c.tls) {
    r.fail(t, "[cluster] needs certs = \"DIR\" (made by `tokenhost cluster init DIR --nodes ...`): cluster traffic is mutual TLS");
  }
  if (auto listen = r.optional_string(t, "listen", "[cluster]"))
    read_address(r, *t.get("listen"), *listen, "[cluster] listen", c.listen_host, c.listen_port);
  if (const toml::node* workers = t.get("workers")) {
    const toml::array* a = workers->as_array();
    if (a == nullptr) r.fail(*workers, "[cluster] workers must be an array of { name, address } tables");
    for (const toml::node& w : *a) {
      const toml::table* wt = w.as_table();
      if (wt == nullptr) r.fail(w, "[cluster] workers: each entry is a { name = \"...\", address = \"host:port\" } table");
      r.check_keys(*wt, {"name", "address"}, "a [cluster] worker");
      ClusterPeer p;
      p.name = r.require_string(*wt, "name", "a [cluster] worker");
      if (auto why = node_name_problem(p.name); !why.empty()) r.fail(*wt->get("name"), "worker \"" + p.name + "\": " + why);
      if (p.name == c.node) r.fail(*wt->get("name"), "worker \"" + p.name + "\" is this node");
      for (const auto& q : c.workers)
        if (q.name == p.name) r.fail(*wt->get("name"), "worker \"" + p.name + "\" is listed twice");
      read_address(r, wt->get("address") ? *wt->get("address") : w, r.require_string(*wt, "address", "a [cluster] worker"),
                   "worker \"" + p.name + "\" address", p.host, p.port);
      c.workers.push_back(std::move(p));
    }
  }
  if (!c.listens() && c.workers.empty())
    r.fail(t, "[cluster] names neither listen (a worker) nor workers (a head): this node would take no part");
  c.heartbeat_ms = uint32_t(r.optional_int(t, "heartbeat_ms", "[cluster]", 50, 60000).value_or(c.heartbeat_ms));
  c.heartbeat_timeout_ms = uint32_t(r.optional_int(t, "heartbeat_timeout_ms", "[cluster]", 100, 600000).value_or(c.heartbeat_timeout_ms));
  c.connect_timeout_ms = uint32_t(r.optional_int(t, "connect_timeout_ms", "[cluster]", 100, 600000).value_or(c.connect_timeout_ms));
  if (c.heartbeat_timeout_ms <= c.heartbeat_ms)
    r.fail(t.get("heartbeat_timeout_ms") ? *t.get("heartbeat_timeout_ms") : static_cast<const toml::node&>(t),
           "[cluster] heartbeat_timeout_ms must exceed heartbeat_ms");
  return c;
}

}  // namespace tokenhost
