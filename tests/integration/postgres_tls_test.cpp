// TLS to PostgreSQL: a private server that accepts only TLS connections (pg_hba:
// hostssl with a password, hostnossl reject), with a certificate made in the test by
// the openssl CLI. sslmode=require and verify-full connect and really run over TLS;
// sslmode=disable is refused; no error shows the password.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include <fmt/format.h>

#include "idem/config.hpp"
#include "idem/error.hpp"
#include "idem/store.hpp"
#include "support/cli_run.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"

namespace idem {
namespace postgres_tls_test {

constexpr std::string_view kPassword = "tlsOnlyPassword9";

// Creates the certificate, the cluster and its TLS-only configuration, then starts it on
// $PORT. Runs as root or as the server's owner; $RUN_AS (when not empty) owns the cluster.
constexpr std::string_view kStartScript = R"sh(
set -eu
as_owner() { if [ -n "$RUN_AS" ]; then (cd "$DIR" && runuser -u "$RUN_AS" -- "$@"); else (cd "$DIR" && "$@"); fi; }
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -keyout "$DIR/server.key" -out "$DIR/server.crt" 2>/dev/null
chmod 600 "$DIR/server.key"
printf '%s\n' "$PASSWORD" > "$DIR/pwfile"
if [ -n "$RUN_AS" ]; then chown -R "$RUN_AS" "$DIR"; fi
as_owner "$PG_BIN/initdb" -D "$DIR/data" -U postgres --pwfile="$DIR/pwfile" --auth-local=trust \
  --auth-host=scram-sha-256 --no-sync -E UTF8 --no-locale >/dev/null
cat >> "$DIR/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR'
ssl = on
ssl_cert_file = '$DIR/server.crt'
ssl_key_file = '$DIR/server.key'
fsync = off
EOF
cat > "$DIR/data/pg_hba.conf" <<EOF
local     all all              trust
hostnossl all all 0.0.0.0/0    reject
hostssl   all all 127.0.0.1/32 scram-sha-256
EOF
as_owner "$PG_BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 30 -o "-p $PORT" start >/dev/null
)sh";

// One server for the suite: starting it (key generation, initdb) is most of the time.
class TlsOnlyPostgres : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto bin = test::env("IDEM_TEST_PG_BIN");
    if (!bin) return;
    bin_ = *bin;
    run_as_ = test::env("IDEM_TEST_PG_RUN_AS").value_or("");
    dir_ = test::scratch_dir() / "tls";
    std::filesystem::create_directories(dir_);
    // The server user must reach the cluster directory through the scratch dir.
    std::filesystem::permissions(test::scratch_dir(), std::filesystem::perms::owner_all |
                                                          std::filesystem::perms::group_exec |
                                                          std::filesystem::perms::others_exec);
    std::mt19937 rng{std::random_device{}()};
    for (int attempt = 0; attempt < 5 && port_ == 0; ++attempt) {
      const int candidate = std::uniform_int_distribution<int>(20000, 60000)(rng);
      std::filesystem::remove_all(dir_ / "data");
      const test::CliResult r =
          test::run_to_completion("/bin/sh", {"-c", std::string(kStartScript)},
                                  {{"DIR", dir_.string()},
                                   {"PG_BIN", bin_},
                                   {"RUN_AS", run_as_},
                                   {"PORT", std::to_string(candidate)},
                                   {"PASSWORD", std::string(kPassword)}});
      if (r.status == 0)
        port_ = candidate;
      else
        last_error_ = r.output;
    }
  }

  void SetUp() override {
    if (bin_.empty()) {
      test::skip_or_fail("IDEM_TEST_PG_BIN is not set (run under scripts/with-postgres.sh)");
      return;
    }
    ASSERT_NE(port_, 0) << "could not start the TLS-only server: " << last_error_;
  }

  static void TearDownTestSuite() {
    if (port_ == 0) return;
    const std::string stop =
        run_as_.empty()
            ? fmt::format("\"{}/pg_ctl\" -D \"{}/data\" -m immediate -w stop", bin_, dir_.string())
            : fmt::format(
                  "cd /tmp && runuser -u {} -- \"{}/pg_ctl\" -D \"{}/data\" -m immediate -w stop",
                  run_as_, bin_, dir_.string());
    static_cast<void>(test::run_to_completion("/bin/sh", {"-c", stop}));
  }

  [[nodiscard]] static std::string url(std::string_view sslmode) {
    return fmt::format("postgresql://postgres:{}@127.0.0.1:{}/postgres?sslmode={}", kPassword,
                       port_, sslmode);
  }

  static bool runs_over_tls(Store& store) {
    auto tx = store.begin();
    const Rows rows = tx->execute("SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()");
    tx->rollback();
    return !rows.empty() && rows[0].text(0) == "true";
  }

  static inline std::string bin_;
  static inline std::string run_as_;
  static inline std::filesystem::path dir_;
  static inline int port_ = 0;
  static inline std::string last_error_;
};

TEST_F(TlsOnlyPostgres, RequireAndVerifyFullConnectOverTls) {
  auto required = open_store(url("require"));
  EXPECT_TRUE(runs_over_tls(*required));
  auto verified = open_store(url("verify-full") + "&sslrootcert=" + (dir_ / "server.crt").string());
  EXPECT_TRUE(runs_over_tls(*verified));
}

TEST_F(TlsOnlyPostgres, PlainConnectionIsRefusedWithoutShowingThePassword) {
  try {
    static_cast<void>(open_store(url("disable")));
    FAIL() << "a connection without TLS was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.code(), ErrorCode::Connection) << message;
    EXPECT_NE(message.find("no encryption"), std::string::npos) << message;  // pg_hba's reject
    EXPECT_EQ(message.find(kPassword), std::string::npos) << message;
  }
}

TEST_F(TlsOnlyPostgres, LibpqVariablesThroughTheLoaderSelectTls) {
  // What a deployment does: PG* in the environment, read once by the config loader.
  ConfigSources sources;
  sources.environment = {{"PGHOST", "127.0.0.1"},    {"PGPORT", std::to_string(port_)},
                         {"PGUSER", "postgres"},     {"PGPASSWORD", std::string(kPassword)},
                         {"PGDATABASE", "postgres"}, {"PGSSLMODE", "require"}};
  const Config config = load_config(sources);
  auto store = open_store(config.store_url, config.store_options);
  EXPECT_TRUE(runs_over_tls(*store));
  EXPECT_EQ(config.describe().find(kPassword), std::string::npos);

  sources.environment.back().second = "disable";
  EXPECT_THROW(static_cast<void>(open_store(load_config(sources).store_url)), Error);
}

}  // namespace postgres_tls_test
}  // namespace idem
