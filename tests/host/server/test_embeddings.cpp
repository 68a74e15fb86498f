// POST /v1/embeddings on stories260K: each embedding is the mean of the final hidden states after the
// output norm, at unit length, against a float64 plain-loop forward on fresh random inputs (model
// "full" of tests/support/stories_group.hpp); the same
// input gives the same bytes alone, repeated, or in a batch of others; OpenAI's shape over HTTP (float
// and base64), a group's embeddings its first member's, and clear errors for bad input.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "harness.hpp"
#include "models.hpp"
#include "openai_client.hpp"
#include "reference_forward.hpp"
#include "runtime/gguf_model.hpp"
#include "stories_group.hpp"
#include "test_server.hpp"

namespace server_embeddings_tests {

using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

std::string manifest() { return group_manifest("plugin = \"router.round_robin\""); }

std::vector<float> floats(const nlohmann::json& v) { return v.get<std::vector<float>>(); }

std::vector<float> from_base64(const std::string& text) {
  static const std::string table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes;
  for (size_t i = 0; i + 3 < text.size() + 3 && i < text.size(); i += 4) {
    uint32_t n = 0;
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + size_t(k)];
      if (c == '=') ++pad;
      n = (n << 6) | (c == '=' ? 0 : uint32_t(table.find(c)));
    }
    bytes += char((n >> 16) & 255);
    if (pad < 2) bytes += char((n >> 8) & 255);
    if (pad < 1) bytes += char(n & 255);
  }
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

}  // namespace

TEST_CASE("embeddings: the mean-pooled last hidden state at unit length, against a float64 forward on random inputs", "[server][embeddings]") {
  Server server(read_deployment("emb.toml", manifest()));
  LoadedModel model = load_gguf_model(require_model_file("stories260K.gguf"), "stories260K");
  auto rng = fresh_rng("embeddings");
  std::vector<std::vector<int32_t>> inputs;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> t(1 + rng() % 120);
    for (auto& x : t) x = int32_t(rng() % 512);
    inputs.push_back(t);
  }
  const auto got = server.gateway().embed("full", inputs);
  REQUIRE(got.size() == inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Vec want = reference_forward(*model.weights, inputs[i]).mean_hidden;
    double norm = 0;
    for (double v : want) norm += v * v;
    norm = std::sqrt(norm);
    REQUIRE(got[i].size() == want.size());
    double worst = 0, length = 0;
    for (size_t d = 0; d < want.size(); ++d) {
      worst = std::max(worst, std::abs(double(got[i][d]) - want[d] / norm));
      length += double(got[i][d]) * got[i][d];
    }
    INFO("input " << i << " of " << inputs[i].size() << " tokens");
    CHECK(worst < 1e-4);
    CHECK(std::sqrt(length) == Approx(1.0).epsilon(1e-5));
  }
  // Deterministic and batch-invariant: the same bytes alone, again, and among other inputs.
  const auto alone = server.gateway().embed("full", {inputs[2]});
  CHECK(alone[0] == got[2]);
  const auto batch = server.gateway().embed("full", {inputs[4], inputs[2], inputs[0], inputs[2]});
  CHECK(batch[1] == got[2]);
  CHECK(batch[3] == got[2]);
  CHECK(batch[0] == got[4]);
}

TEST_CASE("embeddings: OpenAI's shape over HTTP, base64, a group's first member, and clear errors", "[server][embeddings][http]") {
  LiveServer live(manifest());
  const Answer a = post(live, "/v1/embeddings", R"({"model": "full", "input": ["Once upon a time", "The cat"]})");
  REQUIRE(a.status == 200);
  CHECK(a.body["object"] == "list");
  CHECK(a.body["model"] == "full");
  REQUIRE(a.body["data"].size() == 2);
  CHECK(a.body["data"][1]["index"] == 1);
  CHECK(a.body["data"][0]["object"] == "embedding");
  const auto first = floats(a.body["data"][0]["embedding"]);
  CHECK(first.size() == 64);
  CHECK(a.body["usage"]["prompt_tokens"].get<int>() == a.body["usage"]["total_tokens"].get<int>());
  CHECK(a.body["usage"]["prompt_tokens"].get<int>() > 4);
  // One string alone, as base64 floats: the same vector.
  const Answer b = post(live, "/v1/embeddings", R"({"model": "full", "input": "Once upon a time", "encoding_format": "base64"})");
  REQUIRE(b.status == 200);
  CHECK(from_base64(b.body["data"][0]["embedding"].get<std::string>()) == first);
  // A group embeds with its first member (q4 here): not the full model's vector.
  const Answer g = post(live, "/v1/embeddings", R"({"model": "stories", "input": "Once upon a time"})");
  const Answer q = post(live, "/v1/embeddings", R"({"model": "q4", "input": "Once upon a time"})");
  CHECK(floats(g.body["data"][0]["embedding"]) == floats(q.body["data"][0]["embedding"]));
  CHECK(floats(g.body["data"][0]["embedding"]) != first);
  auto refused = [&](const std::string& body, int status, const std::string& param) {
    const Answer r = post(live, "/v1/embeddings", body);
    INFO(body << " -> " << r.body.dump());
    CHECK(r.status == status);
    CHECK(r.body["error"]["param"] == param);
  };
  refused(R"({"model": "full"})", 400, "input");
  refused(R"({"model": "full", "input": []})", 400, "input");
  refused(R"({"model": "full", "input": [1, 2, 9999]})", 400, "input");
  refused(R"({"model": "full", "input": ["a", [1, -1]]})", 400, "input[1]");
  refused(R"({"model": "full", "input": ["a", 7]})", 400, "input[1]");
  refused(R"({"model": "full", "input": "a", "dimensions": 8})", 400, "dimensions");
  refused(R"({"model": "full", "input": "a", "encoding_format": "hex"})", 400, "encoding_format");
  refused(R"({"model": "none", "input": "a"})", 404, "model");
  refused(R"({"model": "full", "input": "a", "temperature": 1})", 400, "temperature");
  std::string long_input = R"({"model": "full", "input": [)";
  for (int i = 0; i < 600; ++i) long_input += (i ? ",5" : "5");
  refused(long_input + "]}", 400, "input");
}

}  // namespace server_embeddings_tests
