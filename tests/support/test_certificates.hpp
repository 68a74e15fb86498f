// Self-signed certificates for the TLS tests, made with OpenSSL when a test runs: no key material
// lives in the tree, and every run has fresh keys.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

namespace tokenhost::testing {

struct TestCertificate {
  std::string certificate_file;  // PEM
  std::string private_key_file;  // PEM, unencrypted
};

// A P-256 key and a self-signed certificate for CN=name, valid for a day, with subjectAltName
// `alt_names` (OpenSSL's syntax: "DNS:localhost,IP:127.0.0.1"), written to dir/NAME.crt and dir/NAME.key.
inline TestCertificate make_test_certificate(const std::string& dir, const std::string& name,
                                             const std::string& alt_names = "DNS:localhost,IP:127.0.0.1") {
  std::filesystem::create_directories(dir);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  if (!key || !cert) throw std::runtime_error("OpenSSL cannot make a test key");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), subject);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_subject_alt_name, alt_names}, std::pair{NID_basic_constraints, std::string("critical,CA:TRUE")}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    if (ext == nullptr) throw std::runtime_error("OpenSSL refuses the extension " + value);
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) throw std::runtime_error("OpenSSL cannot sign a test certificate");
  TestCertificate out{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  auto write = [](const std::string& path, auto&& fn) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr || fn(f) != 1) throw std::runtime_error("cannot write " + path);
    std::fclose(f);
  };
  write(out.certificate_file, [&](FILE* f) { return PEM_write_X509(f, cert.get()); });
  write(out.private_key_file, [&](FILE* f) { return PEM_write_PrivateKey(f, key.get(), nullptr, nullptr, 0, nullptr, nullptr); });
  return out;
}

}  // namespace tokenhost::testing
