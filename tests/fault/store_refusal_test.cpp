// A store that refuses idem's own statements for good, with real processes (`idem consume`, `idem
// relay`, consumer_child) on SQLite and PostgreSQL: a store error that redoing cannot fix stops the
// process with a clear message instead of being retried forever, and a process started on a store
// whose idem schema is missing or newer than it knows refuses to start and says so.
//
//  - consumer_child (the library Consumer) on a store that was never migrated exits at
//    once, naming `idem migrate`;
//  - `idem consume` on a store migrated by a newer idem (a version above the ones this
//    build knows) refuses to start; `idem relay` refuses both kinds of store;
//  - a running `idem consume` whose dedup table disappears (renamed away) exits non-zero
//    with the store's error, commits no offset past what the database committed, and the
//    events it committed stay applied exactly once when the table is back and a new
//    consumer catches up;
//  - a running `idem relay` whose idem_outbox table disappears exits non-zero the same way.
//
// Before the fix the consumer and the relay logged the error and retried every backoff,
// forever (the waits for their exit below time out), and a store migrated by a newer idem
// was used as if it were current. The consumer already refused a never-migrated store
// (through its dedup retention declaration), with a message that blamed an older idem.
// Waits are conditions with deadlines, never sleeps.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "idem/outbox.hpp"
#include "idem/reference/schema.hpp"
#include "idem/store.hpp"
#include "stores/store_errors.hpp"
#include "support/cli_run.hpp"
#include "support/consumer_scenario.hpp"
#include "support/kafka_test_producer.hpp"
#include "support/mock_group.hpp"
#include "support/process.hpp"
#include "support/shared_broker.hpp"
#include "support/store_backends.hpp"
#include "support/wait.hpp"

namespace idem {
namespace store_refusal_test {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::eventually;

// How long a refusing process may take to exit. A process that retries forever never
// does; one that stops takes a backoff or two.
constexpr auto kExitDeadline = 60s;

test::SharedBroker& broker() {
  return test::shared_broker();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class Backend>
class StoreRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    IDEM_REQUIRE_CLI();
    url_ = Backend::fresh_url();
    if (url_.empty()) return;
    store_ = open_store(url_);
    topic_ = test::unique_name("refusal");
    group_ = test::unique_name("refusal-group");
    broker().create_topic(topic_, 1);
    broker().create_topic(topic_ + ".dlq", 1);
  }

  std::int64_t scalar(const std::string& sql) { return Backend::read_scalar(*store_, sql); }
  void execute(const std::string& sql) {
    auto tx = store_->begin();
    static_cast<void>(tx->execute(sql));
    tx->commit();
  }

  /// Records a version of idem's schema above every one this build knows, as a newer
  /// idem's `idem migrate` would.
  void migrate_as_a_newer_idem() {
    migrate_reference_system(*store_);
    auto tx = store_->begin();
    static_cast<void>(
        tx->execute("INSERT INTO idem_schema_migrations (migration_set, version, name, "
                    "applied_at) VALUES ('idem', $1, 'from_a_newer_idem', $2)",
                    detail::known_idem_schema_version(Backend::kind) + 1, "2030-01-01T00:00:00Z"));
    tx->commit();
  }

  std::int64_t committed() {
    const auto offsets = test::committed_offsets(broker().bootstrap_servers(), group_, topic_, 1);
    return std::max<std::int64_t>(offsets.at(0), 0);
  }
  bool committed_at_least(std::int64_t n) {
    try {
      return committed() >= n;
    } catch (const std::exception&) {
      return false;  // the coordinator is busy with the join
    }
  }

  /// `idem consume` (count handler) on `url` as a service; its stderr goes to `log`.
  ChildProcess start_consume(const std::string& log, const std::string& url) {
    return ChildProcess::spawn(
        IDEM_CLI_PATH,
        test::with_mock_group({"consume", "--brokers", broker().bootstrap_servers(), "--topic",
                               topic_, "--group", group_, "--db", url, "--batch", "10", "--kafka",
                               "log_level=2"}),
        {}, log);
  }

  /// `idem consume` (connected with `url`) applies kBefore events; then `break_it` makes
  /// the store refuse its dedup mark for good and kAfter more events arrive. The consumer
  /// must exit 1 with a message containing each of `says`, with nothing committed past
  /// what the database committed. After `fix_it`, a new consumer applies the rest, and no
  /// event twice.
  void consume_break_and_resume(const std::string& url, const std::function<void()>& break_it,
                                const std::function<void()>& fix_it,
                                const std::vector<std::string>& says) {
    constexpr int kBefore = 30;
    constexpr int kAfter = 20;
    const std::string log = log_path("consume");
    ChildProcess consumer = start_consume(log, url);
    static_cast<void>(test::produce_order_events(broker().bootstrap_servers(), topic_, kBefore));
    ASSERT_TRUE(eventually([&] { return committed_at_least(kBefore); }, 90s)) << read_file(log);
    ASSERT_EQ(test::effect_rows(url_, group_), kBefore);

    break_it();
    static_cast<void>(test::produce_order_events(broker().bootstrap_servers(), topic_, kAfter));
    const std::optional<int> status = consumer.wait_for(kExitDeadline);
    ASSERT_TRUE(status.has_value()) << "the consumer kept retrying:\n" << read_file(log);
    EXPECT_EQ(*status, 1);
    const std::string output = read_file(log);
    EXPECT_NE(output.find("idem consumer: stopping: the store refused a statement for good: "),
              std::string::npos)
        << output;
    for (const auto& part : says) EXPECT_NE(output.find(part), std::string::npos) << output;
    // Nothing past what the database committed.
    EXPECT_EQ(committed(), kBefore);
    EXPECT_EQ(test::effect_rows(url_, group_), kBefore);

    fix_it();
    ChildProcess again = start_consume(log, url);
    ASSERT_TRUE(eventually([&] { return committed_at_least(kBefore + kAfter); }, 90s))
        << read_file(log);
    again.kill(SIGTERM);
    EXPECT_EQ(again.wait(60s), 0);
    const auto effects = test::effects_per_event(url_, group_);
    EXPECT_EQ(effects.size(), static_cast<std::size_t>(kBefore + kAfter));
    for (const auto& [id, n] : effects) EXPECT_EQ(n, 1) << "event " << id;
  }

  std::string log_path(const std::string& name) {
    return (test::scratch_dir() / (test::unique_name(name) + ".log")).string();
  }

  std::string url_;
  std::unique_ptr<Store> store_;
  std::string topic_;
  std::string group_;
};

TYPED_TEST_SUITE(StoreRefusal, test::AllBackends, test::BackendName);

TYPED_TEST(StoreRefusal, AConsumerRefusesAStoreThatWasNeverMigrated) {
  if (this->url_.empty()) return;
  const std::string log = this->log_path("child");
  ChildProcess child =
      ChildProcess::spawn(test::child_program("consumer_child"),
                          {"--brokers", broker().bootstrap_servers(), "--topic", this->topic_,
                           "--group", this->group_, "--db", this->url_, "--migrate", "no"},
                          {}, log);
  const std::optional<int> status = child.wait_for(kExitDeadline);
  ASSERT_TRUE(status.has_value()) << "the consumer did not stop: " << read_file(log);
  EXPECT_EQ(*status, 3) << "run() did not throw";
  const std::string output = read_file(log);
  EXPECT_NE(output.find("idem consumer: the store has no idem schema (it was never migrated); "
                        "run `idem migrate` first"),
            std::string::npos)
      << output;
  EXPECT_EQ(this->store_->schema_version(), 0) << "the library consumer migrated by itself";
}

TYPED_TEST(StoreRefusal, IdemConsumeRefusesAStoreMigratedByANewerIdem) {
  if (this->url_.empty()) return;
  this->migrate_as_a_newer_idem();
  test::CliResult r =
      test::run_to_completion(IDEM_CLI_PATH,
                              {"consume", "--brokers", broker().bootstrap_servers(), "--topic",
                               this->topic_, "--group", this->group_, "--db", this->url_},
                              {}, kExitDeadline);
  EXPECT_EQ(r.status, 1) << r.output;
  const int known = detail::known_idem_schema_version(TypeParam::kind);
  EXPECT_NE(r.output.find(fmt::format("idem consumer: the store's idem schema is at version {}, "
                                      "newer than the version {} this idem knows",
                                      known + 1, known)),
            std::string::npos)
      << r.output;
}

TYPED_TEST(StoreRefusal, IdemRelayRefusesAStoreThatWasNeverMigratedOrMigratedByANewerIdem) {
  if (this->url_.empty()) return;
  const std::vector<std::string> args = {
      "relay",           "--db", this->url_, "--brokers", broker().bootstrap_servers(),
      "--poll-interval", "50"};
  const test::CliResult unmigrated =
      test::run_to_completion(IDEM_CLI_PATH, args, {}, kExitDeadline);
  EXPECT_EQ(unmigrated.status, 1) << unmigrated.output;
  EXPECT_NE(unmigrated.output.find("idem relay: the store has no idem schema (it was never "
                                   "migrated); run `idem migrate` first"),
            std::string::npos)
      << unmigrated.output;
  EXPECT_EQ(unmigrated.output.find("ready"), std::string::npos) << unmigrated.output;

  this->migrate_as_a_newer_idem();
  const test::CliResult newer = test::run_to_completion(IDEM_CLI_PATH, args, {}, kExitDeadline);
  EXPECT_EQ(newer.status, 1) << newer.output;
  EXPECT_NE(newer.output.find("it was migrated by a newer idem"), std::string::npos)
      << newer.output;
}

TYPED_TEST(StoreRefusal, IdemConsumeStopsWhenItsDedupTableIsGoneAndKeepsWhatItCommitted) {
  if (this->url_.empty()) return;
  // The table disappears under the running consumer (as a DROP would, but it can come back).
  this->consume_break_and_resume(
      this->url_,
      [&] { this->execute("ALTER TABLE processed_event RENAME TO processed_event_aside"); },
      [&] { this->execute("ALTER TABLE processed_event_aside RENAME TO processed_event"); },
      {"processed_event", "run `idem migrate`"});
}

TYPED_TEST(StoreRefusal, IdemRelayStopsWhenItsOutboxTableIsGone) {
  if (this->url_.empty()) return;
  constexpr int kRows = 10;
  this->store_->migrate();
  const auto enqueue = [&] {
    Outbox outbox;
    for (int i = 0; i < kRows; ++i) {
      auto tx = this->store_->begin();
      outbox.enqueue(*tx, [&](const Uuid& id) {
        return OutboxMessage{"order", fmt::format("agg-{}", i), this->topic_, id.to_string(), {},
                             {}};
      });
      tx->commit();
    }
  };
  const auto on_topic = [&] {
    return test::end_offsets(broker().bootstrap_servers(), this->topic_, 1).at(0);
  };
  enqueue();
  const std::string log = this->log_path("relay");
  ChildProcess relay =
      ChildProcess::spawn(IDEM_CLI_PATH,
                          {"relay", "--db", this->url_, "--brokers", broker().bootstrap_servers(),
                           "--poll-interval", "50", "--kafka", "log_level=2"},
                          {}, log);
  ASSERT_TRUE(test::expect_line(relay, "ready", 30s)) << read_file(log);
  ASSERT_TRUE(eventually(
      [&] {
        return this->scalar("SELECT count(*) FROM idem_outbox WHERE published_at IS NOT NULL") ==
               kRows;
      },
      60s))
      << read_file(log);

  this->execute("ALTER TABLE idem_outbox RENAME TO idem_outbox_aside");
  const std::optional<int> status = relay.wait_for(kExitDeadline);
  ASSERT_TRUE(status.has_value()) << "the relay kept retrying:\n" << read_file(log);
  EXPECT_EQ(*status, 1);
  const std::string output = read_file(log);
  EXPECT_NE(output.find("idem relay: stopping: the store refused a statement for good: "),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("outbox"), std::string::npos) << output;
  EXPECT_NE(output.find("run `idem migrate`"), std::string::npos) << output;

  // The table is back: the next relay publishes what was enqueued since, each row once.
  this->execute("ALTER TABLE idem_outbox_aside RENAME TO idem_outbox");
  enqueue();
  const test::CliResult drained = test::run_to_completion(
      IDEM_CLI_PATH,
      {"relay", "--db", this->url_, "--brokers", broker().bootstrap_servers(), "--poll-interval",
       "50", "--until-empty", "--timeout-s", "60", "--kafka", "log_level=2"},
      {}, 90s);
  EXPECT_EQ(drained.status, 0) << drained.output;
  EXPECT_EQ(this->scalar("SELECT count(*) FROM idem_outbox WHERE published_at IS NULL"), 0);
  EXPECT_EQ(on_topic(), 2 * kRows);
}

#ifdef IDEM_TEST_HAVE_POSTGRES_BACKEND
using StoreRefusalOnPostgres = StoreRefusal<test::PostgresBackend>;

TEST_F(StoreRefusalOnPostgres, IdemConsumeStopsWhenItMayNoLongerWriteItsDedupMarks) {
  if (url_.empty()) return;
  // The consumer connects as a role of its own, which loses INSERT on processed_event while
  // it runs. with-postgres.sh trusts local connections, so the role needs no password.
  constexpr std::string_view kAsPostgres = "postgresql://postgres@";
  if (!url_.starts_with(kAsPostgres)) GTEST_SKIP() << "the DSN does not connect as postgres";
  std::string role = test::unique_name("idem_consumer");
  std::replace(role.begin(), role.end(), '-', '_');
  const std::string role_url =
      fmt::format("postgresql://{}@{}", role, url_.substr(kAsPostgres.size()));
  migrate_reference_system(*store_);
  execute(fmt::format("CREATE ROLE {} LOGIN", role));
  execute(fmt::format("GRANT USAGE, CREATE ON SCHEMA public TO {}", role));
  execute(fmt::format("GRANT ALL ON ALL TABLES IN SCHEMA public TO {}", role));
  execute(fmt::format("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {}", role));
  consume_break_and_resume(
      role_url, [&] { execute(fmt::format("REVOKE INSERT ON processed_event FROM {}", role)); },
      [&] { execute(fmt::format("GRANT INSERT ON processed_event TO {}", role)); },
      {"permission denied", "(SQLSTATE 42501)", "grant the privileges"});
}
#endif

}  // namespace store_refusal_test
}  // namespace idem
