#include "cluster/node_identity.hpp"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "manifest/cluster_decl.hpp"
#include "util/atomic_file.hpp"

namespace tokenhost::cluster {

namespace {

namespace fs = std::filesystem;

struct FreeX509 { void operator()(X509* p) const { X509_free(p); } };
struct FreeKey { void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); } };
struct FreeBio { void operator()(BIO* p) const { BIO_free(p); } };
struct FreeStore { void operator()(X509_STORE* p) const { X509_STORE_free(p); } };
struct FreeStoreCtx { void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); } };
struct FreeMdCtx { void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); } };
struct FreeBn { void operator()(BIGNUM* p) const { BN_free(p); } };
using X509Ptr = std::unique_ptr<X509, FreeX509>;
using KeyPtr = std::unique_ptr<EVP_PKEY, FreeKey>;
using BioPtr = std::unique_ptr<BIO, FreeBio>;

// OpenSSL's queued reason, or fallback when it has none.
std::string openssl_reason(const char* fallback) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return fallback;
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

std::string read_whole(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read the " + std::string(what) + " (" + (fs::exists(path) ? "permission denied" : "no such file") + ")");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

X509Ptr parse_certificate(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return X509Ptr(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

X509Ptr load_certificate(const std::string& path, const char* what) {
  X509Ptr c = parse_certificate(read_whole(path, what));
  if (!c) throw std::runtime_error(path + ": not a PEM certificate (" + openssl_reason("no certificate found") + ")");
  return c;
}

// A password callback that gives none: an encrypted key fails to load instead of prompting.
int no_password(char*, int, int, void*) { return 0; }

KeyPtr load_key(const std::string& path) {
  const std::string pem = read_whole(path, "private key");
  if (pem.find("ENCRYPTED") != std::string::npos)
    throw std::runtime_error(path + ": the private key is encrypted; a node needs it unencrypted (mode 0600)");
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  KeyPtr k(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, no_password, nullptr) : nullptr);
  if (!k) throw std::runtime_error(path + ": not a PEM private key (" + openssl_reason("no key found") + ")");
  return k;
}

// What write(bio) put into a memory BIO, as text; what names the object when it fails.
template <class Write>
std::string pem_text(Write write, const char* what) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) throw std::runtime_error(std::string("cannot write ") + what + " as PEM");
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string to_pem(X509* c) {
  return pem_text([c](BIO* b) { return PEM_write_bio_X509(b, c); }, "a certificate");
}

std::string to_pem(EVP_PKEY* k) {
  return pem_text([k](BIO* b) { return PEM_write_bio_PrivateKey(b, k, nullptr, nullptr, 0, nullptr, nullptr); }, "a private key");
}

std::string common_name(X509* c) {
  char buf[256] = {0};
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(c), NID_commonName, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Verifies c against the CA alone (no intermediates): chain, signature, dates. "" when it holds.
std::string chain_problem(X509* ca, X509* c) {
  std::unique_ptr<X509_STORE, FreeStore> store(X509_STORE_new());
  std::unique_ptr<X509_STORE_CTX, FreeStoreCtx> ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca) != 1 || X509_STORE_CTX_init(ctx.get(), store.get(), c, nullptr) != 1)
    return openssl_reason("OpenSSL cannot set up a verification");
  if (X509_verify_cert(ctx.get()) == 1) return "";
  return std::string("not a certificate of this cluster's CA (") + X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())) + ")";
}

void add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) throw std::runtime_error("OpenSSL refuses the certificate extension " + value + ": " + openssl_reason("?"));
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A certificate for subject CN=name with key's public half, issued by issuer (NULL: self-signed).
X509Ptr make_certificate(const std::string& name, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key, int valid_days,
                         bool is_ca) {
  X509Ptr c(X509_new());
  std::unique_ptr<BIGNUM, FreeBn> serial(BN_new());
  if (!c || !serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1)
    throw std::runtime_error("OpenSSL cannot make a certificate: " + openssl_reason("?"));
  X509_set_version(c.get(), 2);
  BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(c.get()));
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -300);  // a little clock skew between nodes
  X509_gmtime_adj(X509_getm_notAfter(c.get()), static_cast<long>(valid_days) * 24 * 3600);
  X509_set_pubkey(c.get(), key);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(c.get()), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509* signer = issuer != nullptr ? issuer : c.get();
  X509_set_issuer_name(c.get(), X509_get_subject_name(signer));
  add_extension(c.get(), signer, NID_subject_key_identifier, "hash");
  if (is_ca) {
    add_extension(c.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0");
    add_extension(c.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_extension(c.get(), signer, NID_authority_key_identifier, "keyid");
    add_extension(c.get(), signer, NID_basic_constraints, "critical,CA:FALSE");
    add_extension(c.get(), signer, NID_key_usage, "critical,digitalSignature");
    add_extension(c.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
    add_extension(c.get(), signer, NID_subject_alt_name, "DNS:" + name);
  }
  if (X509_sign(c.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0)
    throw std::runtime_error("OpenSSL cannot sign a certificate: " + openssl_reason("?"));
  return c;
}

KeyPtr make_key() {
  KeyPtr k(EVP_EC_gen("P-256"));
  if (!k) throw std::runtime_error("OpenSSL cannot make a P-256 key: " + openssl_reason("?"));
  return k;
}

void append_field(std::string& out, const std::string& field) {
  uint64_t n = field.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += field;
}

}  // namespace

struct NodeIdentity::Keys {
  X509Ptr ca, certificate;
  KeyPtr key;
};

NodeIdentity::NodeIdentity() : keys_(std::make_unique<Keys>()) {}
NodeIdentity::NodeIdentity(NodeIdentity&&) noexcept = default;
NodeIdentity& NodeIdentity::operator=(NodeIdentity&&) noexcept = default;
NodeIdentity::~NodeIdentity() = default;

std::string make_nonce() {
  std::string n(32, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1)
    throw std::runtime_error("OpenSSL's random generator failed: " + openssl_reason("?"));
  return n;
}

InitReport init_cluster(const std::string& dir, const std::vector<std::string>& node_names, int valid_days) {
  if (node_names.empty()) throw std::runtime_error("cluster init: no node names (--nodes a,b,c)");
  if (valid_days < 1 || valid_days > 3650) throw std::runtime_error("cluster init: validity of " + std::to_string(valid_days) + " days is outside 1-3650");
  std::set<std::string> seen;
  for (const auto& n : node_names) {
    if (std::string why = node_name_problem(n); !why.empty()) throw std::runtime_error("cluster init: node name \"" + n + "\": " + why);
    if (!seen.insert(n).second) throw std::runtime_error("cluster init: node \"" + n + "\" is named twice");
    if (n == "ca") throw std::runtime_error("cluster init: \"ca\" is the CA's file name, not a node's");
  }
  const fs::path root(dir);
  for (const auto& n : node_names)
    for (const char* ext : {".pem", ".key"})
      if (fs::exists(root / (n + ext)))
        throw std::runtime_error("cluster init: " + (root / (n + ext)).string() + " exists; a node's files are never overwritten (remove them to reissue)");
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw std::runtime_error("cluster init: cannot make " + dir + ": " + ec.message());

  InitReport report{dir, {}};
  const std::string ca_pem = (root / "ca.pem").string(), ca_key = (root / "ca.key").string();
  X509Ptr ca;
  KeyPtr ca_private;
  const bool has_cert = fs::exists(ca_pem), has_key = fs::exists(ca_key);
  if (has_cert != has_key)
    throw std::runtime_error("cluster init: " + (has_cert ? ca_pem : ca_key) + " exists without " + (has_cert ? ca_key : ca_pem));
  if (has_cert) {
    ca = load_certificate(ca_pem, "CA certificate");
    ca_private = load_key(ca_key);
    if (X509_check_private_key(ca.get(), ca_private.get()) != 1)
      throw std::runtime_error("cluster init: " + ca_key + " is not the key of " + ca_pem);
  } else {
    ca_private = make_key();
    ca = make_certificate("tokenhost cluster CA", ca_private.get(), nullptr, nullptr, valid_days, true);
    write_file_atomically(ca_key, to_pem(ca_private.get()), 0600);
    write_file_atomically(ca_pem, to_pem(ca.get()), 0644);
    report.written = {ca_pem, ca_key};
  }
  for (const auto& n : node_names) {
    KeyPtr key = make_key();
    X509Ptr cert = make_certificate(n, key.get(), ca.get(), ca_private.get(), valid_days, false);
    const std::string cert_file = (root / (n + ".pem")).string(), key_file = (root / (n + ".key")).string();
    write_file_atomically(key_file, to_pem(key.get()), 0600);
    write_file_atomically(cert_file, to_pem(cert.get()), 0644);
    report.written.push_back(cert_file);
    report.written.push_back(key_file);
  }
  return report;
}

NodeIdentity NodeIdentity::load(const std::string& ca_file, const std::string& certificate_file, const std::string& key_file) {
  NodeIdentity id;
  id.keys_->ca = load_certificate(ca_file, "CA certificate");
  id.keys_->certificate = load_certificate(certificate_file, "node certificate");
  id.keys_->key = load_key(key_file);
  if (X509_check_ca(id.keys_->ca.get()) == 0) throw std::runtime_error(ca_file + ": not a CA certificate");
  if (X509_check_private_key(id.keys_->certificate.get(), id.keys_->key.get()) != 1) {
    ERR_clear_error();
    throw std::runtime_error(key_file + ": not the key of " + certificate_file);
  }
  if (std::string why = chain_problem(id.keys_->ca.get(), id.keys_->certificate.get()); !why.empty())
    throw std::runtime_error(certificate_file + ": " + why + " (CA " + ca_file + ")");
  id.name_ = common_name(id.keys_->certificate.get());
  if (std::string why = node_name_problem(id.name_); !why.empty())
    throw std::runtime_error(certificate_file + ": its CN \"" + id.name_ + "\" is not a node name: " + why);
  id.certificate_pem_ = to_pem(id.keys_->certificate.get());
  return id;
}

std::string NodeIdentity::sign(const std::string& message) const {
  std::unique_ptr<EVP_MD_CTX, FreeMdCtx> ctx(EVP_MD_CTX_new());
  size_t n = 0;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, keys_->key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &n, reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1)
    throw std::runtime_error("cluster: cannot sign: " + openssl_reason("?"));
  std::string sig(n, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &n,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1)
    throw std::runtime_error("cluster: cannot sign: " + openssl_reason("?"));
  sig.resize(n);
  return sig;
}

PeerCheck NodeIdentity::verify_certificate(const std::string& cert_pem, const std::string& expected_name) const {
  PeerCheck out;
  if (cert_pem.empty()) return {"", "it sent no certificate"};
  X509Ptr c = parse_certificate(cert_pem);
  if (!c) {
    ERR_clear_error();
    return {"", "its certificate is not PEM"};
  }
  if (std::string why = chain_problem(keys_->ca.get(), c.get()); !why.empty()) return {"", "its certificate is " + why};
  if (X509_check_ca(c.get()) != 0) return {"", "its certificate is a CA's, not a node's"};
  out.name = common_name(c.get());
  if (std::string why = node_name_problem(out.name); !why.empty()) return {"", "its certificate's CN is not a node name: " + why};
  if (!expected_name.empty() && out.name != expected_name)
    return {"", "its certificate names node \"" + out.name + "\", not \"" + expected_name + "\""};
  return out;
}

PeerCheck NodeIdentity::verify_peer(const std::string& cert_pem, const std::string& message, const std::string& signature,
                                    const std::string& expected_name) const {
  PeerCheck out = verify_certificate(cert_pem, expected_name);
  if (!out.ok()) return out;
  X509Ptr c = parse_certificate(cert_pem);
  KeyPtr pub(c ? X509_get_pubkey(c.get()) : nullptr);
  std::unique_ptr<EVP_MD_CTX, FreeMdCtx> ctx(EVP_MD_CTX_new());
  const bool good = pub && ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, pub.get()) == 1 &&
                    EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()), signature.size(),
                                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) == 1;
  ERR_clear_error();
  if (!good) return {"", "its signature does not prove node \"" + out.name + "\" (not made with that certificate's key for this link)"};
  return out;
}

std::string NodeIdentity::hello_message(const std::string& purpose, const std::string& signer, const std::string& peer,
                                        const std::string& nonce, const std::string& context) {
  std::string out = "tokenhost-cluster-hello-v1";
  for (const std::string* f : {&purpose, &signer, &peer, &nonce, &context}) append_field(out, *f);
  return out;
}

}  // namespace tokenhost::cluster
