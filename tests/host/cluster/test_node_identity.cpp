// A cluster's certificates (cluster/node_identity.hpp): `cluster init` writes a CA and node
// certificates that load and prove their names; a stranger's CA, another node's certificate, a
// replayed or altered signature, a CA's certificate and broken files are refused by name; a node's
// files are never overwritten.
#include <catch2/catch.hpp>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>

#include "cluster/node_identity.hpp"
#include "files.hpp"

namespace cluster_node_identity_tests {

using namespace tokenhost;
using namespace tokenhost::cluster;
using tokenhost::testing::TempDir;

namespace {

NodeIdentity load_node(const TempDir& d, const std::string& name) {
  return NodeIdentity::load(d.file("ca.pem"), d.file(name + ".pem"), d.file(name + ".key"));
}

std::string slurp(const std::string& path) {
  auto bytes = tokenhost::testing::read_file(path);
  return std::string(bytes.begin(), bytes.end());
}

std::string load_error(const std::string& ca, const std::string& cert, const std::string& key) {
  try {
    NodeIdentity::load(ca, cert, key);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("cluster init writes a CA and one certificate per node that load under their names", "[cluster]") {
  TempDir d;
  const std::string dir = d.file("certs");
  InitReport r = init_cluster(dir, {"head", "worker-1", "worker-2"});
  REQUIRE(r.written.size() == 8);
  for (const char* name : {"ca", "head", "worker-1", "worker-2"}) {
    struct stat st {};
    REQUIRE(::stat((dir + "/" + name + ".key").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    REQUIRE(::stat((dir + "/" + name + ".pem").c_str(), &st) == 0);
  }
  for (const char* name : {"head", "worker-1", "worker-2"}) {
    NodeIdentity id = NodeIdentity::load(dir + "/ca.pem", dir + "/" + name + ".pem", dir + "/" + name + ".key");
    CHECK(id.name() == name);
    CHECK(id.certificate_pem().find("BEGIN CERTIFICATE") != std::string::npos);
  }
}

TEST_CASE("a node proves its name by signing the link's hello, and other names, messages and keys are refused", "[cluster]") {
  TempDir d;
  init_cluster(d.path.string(), {"head", "worker-1", "worker-2"});
  NodeIdentity head = load_node(d, "head"), w1 = load_node(d, "worker-1"), w2 = load_node(d, "worker-2");
  const std::string nonce = make_nonce();
  const std::string msg = NodeIdentity::hello_message("welcome", "worker-1", "head", nonce, "link-context");
  const std::string sig = w1.sign(msg);

  PeerCheck ok = head.verify_peer(w1.certificate_pem(), msg, sig, "worker-1");
  CHECK(ok.ok());
  CHECK(ok.name == "worker-1");
  CHECK(head.verify_peer(w1.certificate_pem(), msg, sig).name == "worker-1");

  // The manifest expects another node at that address.
  PeerCheck wrong_name = head.verify_peer(w1.certificate_pem(), msg, sig, "worker-2");
  CHECK_FALSE(wrong_name.ok());
  CHECK_THAT(wrong_name.error, Catch::Contains("worker-2"));
  // Worker-2 shows worker-1's certificate (any certificate of the CA passes TLS) but cannot sign for it.
  const std::string forged = w2.sign(msg);
  PeerCheck stolen = head.verify_peer(w1.certificate_pem(), msg, forged, "worker-1");
  CHECK_FALSE(stolen.ok());
  CHECK_THAT(stolen.error, Catch::Contains("signature"));
  // A signature replayed on another link, or with another nonce, or altered, proves nothing.
  CHECK_FALSE(head.verify_peer(w1.certificate_pem(), NodeIdentity::hello_message("welcome", "worker-1", "head", nonce, "other-link"), sig).ok());
  CHECK_FALSE(head.verify_peer(w1.certificate_pem(), NodeIdentity::hello_message("welcome", "worker-1", "head", make_nonce(), "link-context"), sig).ok());
  CHECK_FALSE(head.verify_peer(w1.certificate_pem(), NodeIdentity::hello_message("prove", "worker-1", "head", nonce, "link-context"), sig).ok());
  std::string altered = sig;
  altered[altered.size() / 2] ^= 0x20;
  CHECK_FALSE(head.verify_peer(w1.certificate_pem(), msg, altered).ok());
  CHECK_FALSE(head.verify_peer(w1.certificate_pem(), msg, "").ok());
  // No certificate, not PEM, the CA's own certificate.
  CHECK_THAT(head.verify_certificate("").error, Catch::Contains("no certificate"));
  CHECK_THAT(head.verify_certificate("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n").error, Catch::Contains("not PEM"));
  CHECK_THAT(head.verify_certificate(slurp(d.file("ca.pem"))).error, Catch::Contains("CA"));
}

TEST_CASE("a stranger cluster's certificates are refused, on load and from a peer", "[cluster]") {
  TempDir ours, theirs;
  init_cluster(ours.path.string(), {"head", "worker-1"});
  init_cluster(theirs.path.string(), {"worker-1"});
  NodeIdentity head = load_node(ours, "head");
  NodeIdentity stranger = load_node(theirs, "worker-1");
  const std::string msg = NodeIdentity::hello_message("welcome", "worker-1", "head", make_nonce(), "ctx");
  PeerCheck c = head.verify_peer(stranger.certificate_pem(), msg, stranger.sign(msg), "worker-1");
  CHECK_FALSE(c.ok());
  CHECK_THAT(c.error, Catch::Contains("not a certificate of this cluster's CA"));
  // Our CA with their node's files.
  CHECK_THAT(load_error(ours.file("ca.pem"), theirs.file("worker-1.pem"), theirs.file("worker-1.key")),
             Catch::Contains("not a certificate of this cluster's CA"));
}

TEST_CASE("loading a node's files names the file that is missing, encrypted, foreign or mismatched", "[cluster]") {
  TempDir d;
  init_cluster(d.path.string(), {"head", "worker-1"});
  CHECK_THAT(load_error(d.file("ca.pem"), d.file("head.pem"), d.file("nope.key")), Catch::Contains("nope.key") && Catch::Contains("no such file"));
  CHECK_THAT(load_error(d.file("ca.pem"), d.file("head.pem"), d.file("worker-1.key")),
             Catch::Contains("worker-1.key") && Catch::Contains("not the key of"));
  CHECK_THAT(load_error(d.file("head.pem"), d.file("head.pem"), d.file("head.key")), Catch::Contains("not a CA certificate"));
  std::FILE* f = std::fopen(d.file("junk.pem").c_str(), "w");
  std::fputs("not a certificate\n", f);
  std::fclose(f);
  CHECK_THAT(load_error(d.file("ca.pem"), d.file("junk.pem"), d.file("head.key")), Catch::Contains("junk.pem") && Catch::Contains("not a PEM certificate"));

  // The same key, encrypted: refused at once rather than hanging CAF's module on a password prompt.
  std::FILE* in = std::fopen(d.file("head.key").c_str(), "r");
  EVP_PKEY* key = PEM_read_PrivateKey(in, nullptr, nullptr, nullptr);
  std::fclose(in);
  REQUIRE(key != nullptr);
  std::FILE* out = std::fopen(d.file("encrypted.key").c_str(), "w");
  static const char pass[] = "secret";
  REQUIRE(PEM_write_PrivateKey(out, key, EVP_aes_256_cbc(), reinterpret_cast<const unsigned char*>(pass), 6, nullptr, nullptr) == 1);
  std::fclose(out);
  EVP_PKEY_free(key);
  CHECK_THAT(load_error(d.file("ca.pem"), d.file("head.pem"), d.file("encrypted.key")), Catch::Contains("encrypted"));
}

TEST_CASE("cluster init keeps the CA, adds nodes to it, and never overwrites a node's files", "[cluster]") {
  TempDir d;
  init_cluster(d.path.string(), {"head", "worker-1"});
  const std::string ca_before = slurp(d.file("ca.pem")), head_before = slurp(d.file("head.pem"));

  CHECK_THROWS_WITH(init_cluster(d.path.string(), {"worker-2", "head"}), Catch::Contains("head.pem") && Catch::Contains("never overwritten"));
  CHECK_FALSE(std::filesystem::exists(d.file("worker-2.pem")));  // nothing written when one node is refused
  CHECK(slurp(d.file("head.pem")) == head_before);

  InitReport more = init_cluster(d.path.string(), {"worker-2"});
  CHECK(more.written.size() == 2);
  CHECK(slurp(d.file("ca.pem")) == ca_before);
  NodeIdentity head = load_node(d, "head"), w2 = load_node(d, "worker-2");
  const std::string msg = NodeIdentity::hello_message("prove", "worker-2", "head", make_nonce(), "ctx");
  CHECK(head.verify_peer(w2.certificate_pem(), msg, w2.sign(msg), "worker-2").ok());
}

TEST_CASE("cluster init refuses bad and duplicate node names before writing anything", "[cluster]") {
  TempDir d;
  const std::string dir = d.file("certs");
  CHECK_THROWS_WITH(init_cluster(dir, {}), Catch::Contains("no node names"));
  CHECK_THROWS_WITH(init_cluster(dir, {"a", "a"}), Catch::Contains("\"a\" is named twice"));
  CHECK_THROWS_WITH(init_cluster(dir, {"ok", "bad name"}), Catch::Contains("bad name"));
  CHECK_THROWS_WITH(init_cluster(dir, {"../escape"}), Catch::Contains("../escape"));
  CHECK_THROWS_WITH(init_cluster(dir, {"ca"}), Catch::Contains("names the cluster's CA files"));
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("hello messages are distinct for distinct fields and nonces are fresh", "[cluster]") {
  CHECK(NodeIdentity::hello_message("p", "ab", "c", "n", "x") != NodeIdentity::hello_message("p", "a", "bc", "n", "x"));
  CHECK(NodeIdentity::hello_message("p", "a", "b", "n", "x") == NodeIdentity::hello_message("p", "a", "b", "n", "x"));
  const std::string a = make_nonce(), b = make_nonce();
  CHECK(a.size() == 32);
  CHECK(a != b);
}

}  // namespace cluster_node_identity_tests
