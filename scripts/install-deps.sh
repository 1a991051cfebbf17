#!/usr/bin/env bash
# Installs everything idem needs to build, test and run, from Debian 12 packages.
# Safe to re-run. Needs root (or sudo) for apt-get.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  librdkafka-dev libpq-dev libsqlite3-dev
  libsimdjson-dev nlohmann-json3-dev libvalijson-dev libcli11-dev libfmt-dev libspdlog-dev
  libssl-dev libcurl4-openssl-dev libcpp-httplib-dev libboost-dev libtomlplusplus-dev prometheus-cpp-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev clang-format clang-tidy
  postgresql-15 postgresql-client-15
  python3-confluent-kafka
  python3-dev pybind11-dev python3-venv python3-setuptools python3-wheel python3-pytest
  python3-psycopg python3-psycopg2 python3-asyncpg python3-pydantic
  chromium chromium-driver
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# The tests start their own throwaway PostgreSQL cluster; the Debian package's
# default cluster is not needed, so don't create one.
if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
  "${sudo_cmd[@]}" mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | "${sudo_cmd[@]}" tee /etc/postgresql-common/createcluster.d/idem.conf >/dev/null
fi
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
