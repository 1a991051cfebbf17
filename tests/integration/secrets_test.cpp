// Secrets never appear in what idem prints: `idem config check` (valid and invalid
// configurations) and connection errors. Each test plants distinct secret strings in
// every place a secret can come from and greps the whole output for them.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "support/cli_run.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"

namespace idem {
namespace secrets_test {

const std::vector<std::string> kSecrets = {
    "fileDbPassword1", "fileSaslPassword2", "envPgPassword3",   "envSslKeyPassword4",
    "urlPassword5",    "flagClientSecret6", "flagSaslPassword7"};

void expect_no_secret(const std::string& output) {
  for (const auto& secret : kSecrets) {
    EXPECT_EQ(output.find(secret), std::string::npos) << "secret " << secret << " in:\n" << output;
  }
}

std::string secrets_file() {
  const auto path = test::scratch_dir() / "secrets.toml";
  std::ofstream(path) << "[postgres]\npassword = \"fileDbPassword1\"\n"
                         "[kafka]\n\"sasl.password\" = \"fileSaslPassword2\"\n";
  return path.string();
}

const test::ChildProcess::Env kSecretEnv = {{"PGPASSWORD", "envPgPassword3"},
                                            {"IDEM_KAFKA_SSL_KEY_PASSWORD", "envSslKeyPassword4"}};

TEST(Secrets, ConfigCheckRedactsEverySecret) {
  IDEM_REQUIRE_CLI();
  const test::CliResult r =
      test::run_to_completion(IDEM_CLI_PATH,
                              {"config", "check", "--config", secrets_file(), "--db",
                               "postgresql://app:urlPassword5@db.internal/orders", "--kafka",
                               "sasl.oauthbearer.config=flagClientSecret6", "--set",
                               "kafka.sasl.password=flagSaslPassword7"},
                              kSecretEnv);
  ASSERT_EQ(r.status, 0) << r.output;
  expect_no_secret(r.output);
  // The keys are there, with their origins; only the values are hidden.
  for (const auto* shown :
       {"postgres.password = <redacted>", "kafka.sasl.password = <redacted>",
        "kafka.ssl.key.password = <redacted>", "kafka.sasl.oauthbearer.config = <redacted>",
        "store.url = postgresql://app:<redacted>@db.internal/orders",
        "# effective store: postgresql:dbname='orders' host='db.internal' "
        "password=<redacted> user='app'"}) {
    EXPECT_NE(r.output.find(shown), std::string::npos) << shown << " not in:\n" << r.output;
  }
}

TEST(Secrets, ConfigErrorsNameSecretKeysWithoutTheirValues) {
  IDEM_REQUIRE_CLI();
  const test::CliResult r = test::run_to_completion(
      IDEM_CLI_PATH,
      {"config", "check", "--config", secrets_file(), "--db",
       "postgresql:host password=urlPassword5", "--kafka", "custom.client.secret=flagClientSecret6",
       "--set", "postgres.port=flagSaslPassword7"},
      kSecretEnv);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("store.url (flag --db): not a valid libpq connection string"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("kafka.custom.client.secret (flag --kafka): librdkafka rejects "
                          "<redacted>: No such configuration property"),
            std::string::npos)
      << r.output;
  // postgres.port is not a secret key, so its bad value is quoted: drop it from the grep.
  const std::string without_port = r.output.substr(0, r.output.find("postgres.port"));
  expect_no_secret(without_port);
}

TEST(Secrets, ConnectionErrorsDoNotShowThePassword) {
  IDEM_REQUIRE_CLI();
  // Port 1 on loopback refuses at once; the error must not carry the URL's password
  // nor the one from PGPASSWORD.
  for (const std::string url : {"postgresql://app:urlPassword5@127.0.0.1:1/orders",
                                "postgresql:host=127.0.0.1 port=1 password=urlPassword5"}) {
    const test::CliResult r = test::run_to_completion(
        IDEM_CLI_PATH, {"migrate", "--db", url, "--set", "store.connect_timeout=2s"}, kSecretEnv);
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
    expect_no_secret(r.output);
  }
}

}  // namespace secrets_test
}  // namespace idem
