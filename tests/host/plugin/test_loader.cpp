// The loader: every failure mode has its fixture under tests/fixtures/ and an asserted message; the
// host keeps serving after each; libraries load from private copies, reload a replaced file, and
// leave memory when their last instance is gone.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness.hpp"
#include "plugin/plugin_manifest.hpp"
#include "plugin/library.hpp"
#include "test_server.hpp"

namespace plugin_loader_tests {

namespace fs = std::filesystem;
using namespace tokenhost;
using namespace tokenhost::testing;
using Catch::Matchers::Contains;

namespace {

struct FailureMode {
  const char* mode;
  std::vector<std::string> message_parts;  // every part must appear in the error
};

// "M.m" of this host's ABI with the major and minor moved by dm and dn: the fixtures are built with the
// host's headers (abi_major: major + 1; abi_minor_newer: minor + 1).
std::string abi(int dm = 0, int dn = 0) {
  return std::to_string(TH_ABI_VERSION_MAJOR + dm) + "." + std::to_string(TH_ABI_VERSION_MINOR + dn);
}

// Each broken fixture, and what the host must say about it.
const std::vector<FailureMode> kLoadFailures = {
    {"missing_entry", {"has no entry symbol 'tokenhost_plugin_entry'", "fixture_missing_entry.so"}},
    {"abi_major", {"built for ABI " + abi(1) + " but this host speaks ABI " + abi(), "major versions must be equal"}},
    {"abi_minor_newer", {"built for ABI " + abi(0, 1) + ", newer than this host's ABI " + abi()}},
    {"kind_mismatch", {"the library declares kind 'router' but plugin.toml says 'scheduler'"}},
    {"null_vtable_member", {"required vtable member schedule is NULL"}},
    {"missing_file", {"library file '", "fixture_missing_file.so' does not exist"}},
    {"corrupt_file", {"cannot load library '", "fixture_corrupt_file.so", "invalid ELF header"}},
    {"unresolved_symbol", {"undefined symbol: tokenhost_fixture_undefined_function"}},
    {"vtable_short", {"scheduler vtable struct_size 32 is smaller than the ABI " + abi() + " scheduler vtable (40 bytes)"}},
    {"version_mismatch", {"the library declares version 1.0.1 but plugin.toml says 1.0.0"}},
    {"prefix_partial", {"kvcache vtable sets 1 of seq_lookup, seq_publish and cache_flush: prefix caching needs all three (or none)"}},
    {"kv_connector_old", {"the kind kv_connector does not exist in ABI 1.8, which the library declares"}},
    {"constraint_old", {"the kind constraint does not exist in ABI 1.10, which the library declares"}},
};

// What an engine's scheduler slot asks of a plugin instance, on the first device.
InstanceSpec scheduler_spec() {
  InstanceSpec spec;
  spec.engine = "e";
  spec.slot = "scheduler";
  spec.model = model_spec();
  spec.device = devices().front();
  return spec;
}

std::string load_error(const std::string& manifest_path) {
  try {
    PluginLibrary::open(read_plugin_manifest(manifest_path));
  } catch (const PluginError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("loader: a valid plugin written in C loads, creates, and unloads when its last user goes", "[loader]") {
  size_t open_before = PluginLibrary::open_count();
  auto lib = PluginLibrary::open(read_plugin_manifest(fixture("good")));
  REQUIRE(lib->id() == "scheduler.fixture");
  REQUIRE(lib->version() == "1.0.0");
  REQUIRE(lib->kind() == TH_KIND_SCHEDULER);
  const std::string mapped = lib->mapped_path();
  REQUIRE(PluginLibrary::is_mapped(mapped));
  REQUIRE(mapped.find(fixture_dir()) == std::string::npos);  // a private copy, not the file itself

  const InstanceSpec spec = scheduler_spec();
  auto a = PluginInstance::create(lib, spec);
  auto b = PluginInstance::create(lib, spec);
  lib.reset();
  a.reset();
  REQUIRE(PluginLibrary::is_mapped(mapped));  // b still holds it
  b.reset();
  REQUIRE_FALSE(PluginLibrary::is_mapped(mapped));
  REQUIRE_FALSE(fs::exists(mapped));
  REQUIRE(PluginLibrary::open_count() == open_before);
}

TEST_CASE("loader: private copies leave no directory behind, and directories of ended processes are removed", "[loader]") {
  REQUIRE(PluginLibrary::open_count() == 0);  // this process holds no copy yet
  // A process that ended with copies open: a child that exits at once, its directory made for it.
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  const fs::path stale = fs::temp_directory_path() / ("tokenhost-plugins-" + std::to_string(child));
  fs::create_directories(stale);
  std::ofstream(stale / "scheduler.fixture.1.1.so") << "left by a crash";
  const fs::path stale_new = fs::temp_directory_path() / ("tokenhost-plugins-" + std::to_string(child) + "-Ab12Cd");
  fs::create_directories(stale_new);
  // A live process's directory (this one's parent) must stay.
  const fs::path live = fs::temp_directory_path() / ("tokenhost-plugins-" + std::to_string(getppid()));
  const bool live_existed = fs::exists(live);
  fs::create_directories(live);

  auto lib = PluginLibrary::open(read_plugin_manifest(fixture("good")));
  const fs::path dir = fs::path(lib->mapped_path()).parent_path();
  REQUIRE(dir.filename().string().rfind("tokenhost-plugins-" + std::to_string(getpid()) + "-", 0) == 0);
  // Made by mkdtemp: this user's, and no one else's to read or write.
  REQUIRE((fs::status(dir).permissions() & fs::perms::all) == fs::perms::owner_all);
  REQUIRE_FALSE(fs::exists(stale));
  REQUIRE_FALSE(fs::exists(stale_new));
  REQUIRE(fs::exists(live));
  auto second = PluginLibrary::open(read_plugin_manifest(fixture("good")));
  lib.reset();
  REQUIRE(fs::exists(dir));  // the second copy is still in it
  second.reset();
  REQUIRE_FALSE(fs::exists(dir));
  if (!live_existed) fs::remove(live);
}

TEST_CASE("loader: a plugin built for an older ABI minor loads and runs on this host", "[loader]") {
  // Vendors' binaries keep working across host releases of the same major: a 1.0 plugin on a 1.1 host.
  static_assert(TH_ABI_VERSION_MINOR > 0, "the fixture is built for minor 0, older than these headers");
  auto lib = PluginLibrary::open(read_plugin_manifest(fixture("abi_minor_older")));
  REQUIRE(lib->abi_major() == TH_ABI_VERSION_MAJOR);
  REQUIRE(lib->abi_minor() == 0);
  const InstanceSpec spec = scheduler_spec();
  auto instance = PluginInstance::create(lib, spec);
  REQUIRE(instance != nullptr);
}

TEST_CASE("loader: each broken plugin is refused with a message naming the problem, and the host keeps serving",
          "[loader]") {
  auto server = make_test_server();
  auto reference = server->gateway().generate(request_for(*server, "before", 4));
  REQUIRE(reference.finish_reason == "length");
  for (const auto& failure : kLoadFailures) {
    INFO("fixture " << failure.mode);
    size_t open_before = PluginLibrary::open_count();
    std::string error = load_error(fixture(failure.mode));
    REQUIRE_FALSE(error.empty());
    for (const auto& part : failure.message_parts) CHECK_THAT(error, Contains(part));
    CHECK_THAT(error, Contains(fixture(failure.mode)));  // names the plugin.toml it came from
    CHECK(PluginLibrary::open_count() == open_before);   // nothing of the failed load stays open
    auto again = server->gateway().generate(request_for(*server, "before", 4));
    REQUIRE(again.finish_reason == "length");
    REQUIRE(again.tokens == reference.tokens);
  }
}

TEST_CASE("loader: create() failing reports the plugin's own message", "[loader]") {
  auto lib = PluginLibrary::open(read_plugin_manifest(fixture("create_fails")));
  const InstanceSpec spec = scheduler_spec();
  REQUIRE_THROWS_WITH(PluginInstance::create(lib, spec),
                      Contains("scheduler.create_fails: create() failed with TH_ERR_INVALID_ARGUMENT: "
                               "fixture refuses to start: the answer must be 42"));
}

TEST_CASE("loader: a broken plugin registered through the admin path is refused there and changes nothing", "[loader][admin]") {
  auto server = make_test_server();
  auto before = server->status()["engines"][0]["scheduler"];
  // The good fixture's id is the id most broken fixtures declare: none of them may replace it.
  REQUIRE(server->register_plugin(fixture("good")) == "scheduler.fixture");
  const auto plugins_before = server->plugins();
  for (const auto& failure : kLoadFailures) {
    INFO("fixture " << failure.mode);
    try {
      server->register_plugin(fixture(failure.mode));
      FAIL("a library that cannot load was registered");
    } catch (const AdminError& e) {
      CHECK(e.http_status == 400);
      for (const auto& part : failure.message_parts) CHECK_THAT(std::string(e.what()), Contains(part));
    }
    REQUIRE(server->plugins() == plugins_before);
    REQUIRE(server->status()["engines"][0]["scheduler"] == before);
    REQUIRE(server->gateway().generate(request_for(*server, "still serving", 3)).finish_reason == "length");
  }
  // A library that loads but cannot start is refused at the swap.
  std::string id = server->register_plugin(fixture("create_fails"));
  REQUIRE_THROWS_WITH(server->set_slot("main", "scheduler", id, {}), Contains("the answer must be 42"));
  REQUIRE(server->status()["engines"][0]["scheduler"] == before);
  // The good fixture is still the one its id names.
  REQUIRE(server->register_plugin(fixture("good")) == "scheduler.fixture");
  REQUIRE_THAT(server->set_slot("main", "scheduler", "scheduler.fixture", {}), Contains("scheduler.fixture 1.0.0"));
}

TEST_CASE("loader: loading the same path again after the file changed loads the new file", "[loader]") {
  fs::path dir = fs::temp_directory_path() / ("tokenhost-reload-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto install = [&](const std::string& mode) {
    // Atomic rename, as a package manager installs: the old file stays intact for whoever maps it.
    fs::path from = fs::path(fixture_dir()) / mode;
    fs::copy_file(from / ("fixture_" + mode + ".so"), dir / "next.so", fs::copy_options::overwrite_existing);
    fs::rename(dir / "next.so", dir / "fixture_router.so");
    std::ifstream in(from / "plugin.toml");
    std::stringstream text;
    text << in.rdbuf();
    std::string toml = text.str();
    toml.replace(toml.find("fixture_" + mode + ".so"), ("fixture_" + mode + ".so").size(), "fixture_router.so");
    std::ofstream(dir / "plugin.toml") << toml;
  };
  PluginCatalog catalog({dir.string()});
  install("router_v1");
  catalog.scan();
  auto v1 = catalog.load("router.fixture");
  REQUIRE(v1->version() == "1.0.0");
  REQUIRE(catalog.load("router.fixture") == v1);  // unchanged file: the open library is shared
  install("router_v2");
  catalog.add((dir / "plugin.toml").string());
  auto v2 = catalog.load("router.fixture");
  REQUIRE(v2->version() == "2.0.0");  // not dlopen's cached copy of the old file
  REQUIRE(v1->version() == "1.0.0");  // the old one still runs for whoever holds it
  std::string v1_mapped = v1->mapped_path();
  v1.reset();
  REQUIRE_FALSE(PluginLibrary::is_mapped(v1_mapped));
  REQUIRE(PluginLibrary::is_mapped(v2->mapped_path()));
  fs::remove_all(dir);
}

TEST_CASE("loader: an unknown plugin id names the closest known one", "[loader]") {
  REQUIRE_THROWS_WITH(builtin_catalog().load("scheduler.fifoo"), Contains("did you mean 'scheduler.fifo'?"));
}

}  // namespace plugin_loader_tests
