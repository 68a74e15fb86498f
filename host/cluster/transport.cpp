#include "cluster/transport.hpp"

#include <stdexcept>

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <spdlog/spdlog.h>

#include "cluster/tls_guard.hpp"

namespace tokenhost::cluster {

std::shared_ptr<const NodeIdentity> load_identity(const ClusterDecl& c) {
  if (!c.tls) return nullptr;
  auto id = std::make_shared<const NodeIdentity>(NodeIdentity::load(c.ca, c.certificate, c.private_key));
  if (id->name() != c.node)
    throw std::runtime_error(c.certificate + ": the certificate names node \"" + id->name() + "\", [cluster] node is \"" + c.node + "\"");
  return id;
}

void configure(caf::actor_system_config& cfg, const ClusterDecl& c) {
  cfg.load<caf::io::middleman>();
  if (!c.tls) return;
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = c.certificate;
  cfg.openssl_key = c.private_key;
  cfg.openssl_cafile = c.ca;
}

void check_transport(caf::actor_system& system, const ClusterDecl& c) {
  if (!c.tls) {
    spdlog::warn("cluster: TLS is off ([cluster] tls): any peer that reaches {} joins without a certificate",
                 c.listens() ? c.listen_host + ":" + std::to_string(c.listen_port) : std::string("this node's links"));
    return;
  }
  if (!system.has_openssl_manager() || !system.openssl_manager().authentication_enabled())
    throw std::runtime_error("cluster: CAF's OpenSSL module would not authenticate peers (anonymous TLS): refusing to run the cluster");
  if (!tls_guarded())
    throw std::runtime_error(
        "cluster: OpenSSL's TLS calls do not reach this process's TLS guards (cluster/tls_guard.hpp): one refused "
        "handshake would close every link; refusing to run the cluster");
}

uint16_t publish_node(caf::actor_system& system, const ClusterDecl& c, const node_actor& node) {
  const std::string where = c.listen_host + ":" + std::to_string(c.listen_port);
  auto port = c.tls ? caf::openssl::publish(node, c.listen_port, c.listen_host.c_str(), true)
                    : caf::io::publish(node, c.listen_port, c.listen_host.c_str(), true);
  if (!port) throw std::runtime_error("cluster: cannot listen on " + where + ": " + system.render(port.error()));
  spdlog::info("cluster: node {} takes heads on {} ({})", c.node, where, c.tls ? "mutual TLS" : "plaintext");
  return *port;
}

}  // namespace tokenhost::cluster
