#!/usr/bin/env bash
# Installs the Debian 12 packages tokenhost builds and tests with. Idempotent: when everything is there
# it checks and returns in about a second. Run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake git
  libcaf-dev libtomlplusplus-dev libspdlog-dev catch2 libboost1.81-dev libssl-dev nlohmann-json3-dev libcli11-dev
  zlib1g-dev  # kv_connector.disk's checksums
  libicu-dev  # the tokenizers' Unicode data
  libucx-dev  # kv_connector.ucx (UCX 1.13: shared memory, TCP, RDMA)
  curl openssl  # the CLI tests: curl against the server, openssl makes throwaway TLS certificates
  clang-15 libfuzzer-15-dev  # the fuzz targets (fuzz/), built with clang and libFuzzer
  nodejs prometheus  # the tests: the OpenAI Node SDK against the server (npm), promtool on /metrics
  chromium chromium-driver fonts-dejavu-core  # the dashboard test: headless Chromium through chromedriver
)
# Debian's nodejs leaves npm to its own package; NodeSource's nodejs carries npm and conflicts with it.
if ! command -v npm >/dev/null 2>&1; then packages+=(npm); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
