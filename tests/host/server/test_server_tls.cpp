// A live server whose two ports speak TLS from its manifest ([server] tls_certificate and
// admin_tls_certificate): a completion and the admin API over HTTPS, an untrusting admin client told
// how to trust, and plain HTTP told to use https.
#include <catch2/catch.hpp>

#include "admin/admin_client.hpp"
#include "files.hpp"
#include "openai_client.hpp"
#include "test_certificates.hpp"

namespace server_tls_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

TEST_CASE("tls: a live server with TLS on both ports serves completions and its admin API over HTTPS", "[http][tls][server]") {
  TempDir dir;
  const auto cert = make_test_certificate(dir.path.string(), "server");
  std::string manifest = stories_manifest();
  const std::string at = "log_level = \"warn\"";
  manifest.replace(manifest.find(at), at.size(),
                   at + "\ntls_certificate = \"" + cert.certificate_file + "\"\ntls_private_key = \"" + cert.private_key_file +
                       "\"\nadmin_tls_certificate = \"" + cert.certificate_file + "\"\nadmin_tls_private_key = \"" +
                       cert.private_key_file + "\"\nadmin_token = \"tls-test-admin-token-0001\"");
  LiveServer s(manifest);

  HttpClientOptions options;
  options.tls = {true, cert.certificate_file, true};
  options.read_timeout = 60s;
  HttpClient gateway("127.0.0.1", s.http->gateway_port(), options);
  HttpClientResult r = gateway.request("POST", "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})",
                                       "application/json");
  REQUIRE(r.ok());
  REQUIRE(r.status == 200);
  const auto body = nlohmann::json::parse(r.body);
  CHECK(body["usage"]["completion_tokens"] == 8);
  CHECK_FALSE(body["choices"][0]["text"].get<std::string>().empty());

  const std::string admin_url = "https://127.0.0.1:" + std::to_string(s.http->admin_port());
  AdminClient admin(admin_url, "tls-test-admin-token-0001", cert.certificate_file);
  CHECK(admin.get("/admin/engines")["engines"].size() == 1);
  // A client that does not trust the certificate is told how to.
  AdminClient untrusting(admin_url, "tls-test-admin-token-0001", make_test_certificate(dir.path.string(), "other").certificate_file);
  CHECK_THROWS_WITH(untrusting.get("/admin/engines"), Contains("certificate verify failed") && Contains("--cacert"));
  // Plain HTTP to either port gets the 400 that names https.
  HttpClientResult plain = HttpClient("127.0.0.1", s.http->gateway_port()).request("GET", "/v1/models");
  CHECK(plain.status == 400);
  CHECK_THAT(plain.body, Contains("this port speaks HTTPS"));
}

}  // namespace server_tls_tests
