// [cluster] of a deployment manifest: this node's place in a deployment of several processes
// (cluster/ runs it). A worker listens for heads; a head connects to its workers and routes to their
// engines beside its own; a node may be both.
//
//   [cluster]
//   node = "head"                       # this node's name: its certificate's CN
//   certs = "certs"                     # `tokenhost cluster init` output: ca.pem, NODE.pem, NODE.key
//   listen = "127.0.0.1:9101"           # where heads reach this node (a worker); absent: it takes none
//   workers = [{ name = "worker-1", address = "127.0.0.1:9101" }]   # a head's workers
//   heartbeat_ms = 1000                 # a link's heartbeat
//   heartbeat_timeout_ms = 3000         # a link with no answer for this long is lost
//   connect_timeout_ms = 5000           # each connection attempt, the hello included
//
// Cluster traffic is mutual TLS against the cluster's CA, always: `tls = "off: ..."` with the exact
// words of kClusterPlaintextWords turns it off (any peer that reaches the port then joins).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/toml_reader.hpp"

namespace tokenhost {

struct ClusterPeer {
  std::string name;
  std::string host;
  uint16_t port = 0;
};

// The words that turn TLS off, and nothing shorter: a manifest must say what it gives up.
constexpr const char* kClusterPlaintextWords = "off: any peer that reaches the cluster port joins without a certificate";

struct ClusterDecl {
  bool enabled = false;  // the manifest has [cluster]
  std::string node;
  std::string ca, certificate, private_key;  // absolute; empty when TLS is off
  bool tls = true;
  std::string listen_host;  // "" when this node takes no heads
  uint16_t listen_port = 0;
  std::vector<ClusterPeer> workers;
  uint32_t heartbeat_ms = 1000, heartbeat_timeout_ms = 3000, connect_timeout_ms = 5000;
  bool listens() const { return !listen_host.empty(); }
};

// Reads [cluster]; base: the manifest's folder (certs is relative to it). Throws ManifestError.
ClusterDecl read_cluster(const TomlReader& r, const toml::table& cluster, const std::string& base);

// A node's name: 1-63 of [A-Za-z0-9._-]; "" when `name` is one, else why not.
std::string node_name_problem(const std::string& name);

}  // namespace tokenhost
