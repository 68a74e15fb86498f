// A cluster node's identity: the CA that admits nodes, and this node's certificate and key, as
// `tokenhost cluster init` writes them. Mutual TLS (cluster/transport.hpp) keeps out every peer
// without a certificate of the CA; it does not say which node a peer is, since any certificate of
// the CA passes the handshake. So each link also proves names: a node sends its certificate, whose
// CN is its node name, and signs a message that binds both names, the other side's fresh nonce and
// the link's two CAF node ids with the certificate's key (hello_message). A peer that shows another
// node's certificate cannot sign for it.
//
// OpenSSL's libcrypto only; every key is P-256 and every signature ECDSA over SHA-256.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace tokenhost::cluster {

// What `tokenhost cluster init` wrote, in the order written.
struct InitReport {
  std::string dir;
  std::vector<std::string> written;
};

// Writes into dir (made when missing) the cluster's CA (ca.pem, ca.key, kept when both exist: new
// nodes join the same cluster) and, for each name, NAME.pem (CN=NAME, subjectAltName DNS:NAME,
// signed by the CA, valid for valid_days) and NAME.key (mode 0600). Each file is written whole or
// not at all. Throws std::runtime_error naming the problem: a bad node name, a duplicate, a node
// whose files already exist (never overwritten), a CA key that does not match its certificate.
InitReport init_cluster(const std::string& dir, const std::vector<std::string>& node_names, int valid_days = 825);

// The result of checking a peer: its node name when accepted, else why not.
struct PeerCheck {
  std::string name;
  std::string error;
  bool ok() const { return error.empty(); }
};

// 32 random bytes from OpenSSL's generator: a hello's nonce.
std::string make_nonce();

class NodeIdentity {
 public:
  // Reads and checks the three files: each readable, the key unencrypted and matching the
  // certificate, the certificate issued by the CA and valid now. Throws std::runtime_error naming
  // the file and what is wrong (CAF's module would hang on an encrypted key instead).
  static NodeIdentity load(const std::string& ca_file, const std::string& certificate_file, const std::string& key_file);

  NodeIdentity(NodeIdentity&&) noexcept;
  NodeIdentity& operator=(NodeIdentity&&) noexcept;
  ~NodeIdentity();

  const std::string& name() const { return name_; }                        // the certificate's CN
  const std::string& certificate_pem() const { return certificate_pem_; }  // sent to peers

  // An ECDSA signature (DER) of message with this node's key.
  std::string sign(const std::string& message) const;

  // Accepts cert_pem when it is issued by this cluster's CA, valid now, a node's certificate (not a
  // CA) and, when expected_name is not empty, names that node.
  PeerCheck verify_certificate(const std::string& cert_pem, const std::string& expected_name = {}) const;

  // verify_certificate, and signature is the certificate's key's signature of message.
  PeerCheck verify_peer(const std::string& cert_pem, const std::string& message, const std::string& signature,
                        const std::string& expected_name = {}) const;

  // The message a node signs to prove its name on one link: purpose ("welcome", "prove"), the
  // signer's and the peer's names, the peer's nonce and the link's context, each length-prefixed so
  // that no two different tuples give the same bytes.
  static std::string hello_message(const std::string& purpose, const std::string& signer, const std::string& peer,
                                   const std::string& nonce, const std::string& context);

 private:
  struct Keys;
  NodeIdentity();
  std::unique_ptr<Keys> keys_;
  std::string name_, certificate_pem_;
};

}  // namespace tokenhost::cluster
