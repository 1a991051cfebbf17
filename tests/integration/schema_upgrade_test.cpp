// Upgrading a store of the previous release (tests/fixtures/previous_release/), on SQLite
// and PostgreSQL. The store is built with that release's migration files and filled with
// that release's statements; then this release's `idem migrate` upgrades it:
//   - the outbox rows are kept (ids, event ids, payloads, headers, published and rejected
//     states, the id sequence's position) and this release's relay publishes them as
//     before; the console's audit rows are kept and read by this release's console;
//   - that release's relay, order service, `idem maintain` and `idem outbox` statements
//     keep working through the compatibility view `outbox`, on a connection opened (and
//     with statements prepared) before the upgrade, and see the rows this release writes;
//     PostgreSQL's LISTEN wake-up and privileges granted on the table reach them too;
//   - a store of this release has only the new names and no `outbox`, has the schema of
//     an upgraded one, and leaves an application's own `outbox` table alone.
#include <libpq-fe.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "console/replay_audit.hpp"
#include "fixtures/previous_release/previous_release.hpp"
#include "idem/console/schema.hpp"
#include "idem/outbox.hpp"
#include "idem/relay.hpp"
#include "idem/store.hpp"
#include "idem/stores/postgres.hpp"
#include "stores/migration.hpp"
#include "stores/store_errors.hpp"
#include "support/cli_run.hpp"
#include "support/dev_broker_suite.hpp"
#include "support/store_backends.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem {
namespace schema_upgrade_test {

namespace previous = test::previous_release;
using namespace std::chrono_literals;

constexpr const char* kTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Runs one statement in a transaction of its own; returns its rows.
Rows run(Store& store, std::string_view sql, std::span<const Param> params = {}) {
  auto tx = store.begin();
  Rows rows = tx->execute_params(sql, params);
  tx->commit();
  return rows;
}

/// The statements that list every object of the outbox's schema, one line each, sorted:
/// columns, indexes, constraints, triggers and the id sequence of idem_outbox.
std::vector<std::string> outbox_schema(Store& store) {
  const std::vector<const char*> queries =
      store.backend() == Backend::Postgres
          ? std::vector<const char*>{
                "SELECT 'column ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || "
                "CASE WHEN a.attnotnull THEN ' not null' ELSE '' END || ' identity:' || "
                "a.attidentity::text || ' default:' || coalesce(pg_get_expr(d.adbin, d.adrelid), '') "
                "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND "
                "d.adnum = a.attnum WHERE a.attrelid = 'idem_outbox'::regclass AND a.attnum > 0 "
                "AND NOT a.attisdropped ORDER BY a.attnum",
                "SELECT 'index ' || indexname || ': ' || indexdef FROM pg_indexes "
                "WHERE tablename = 'idem_outbox'",
                "SELECT 'constraint ' || conname || ': ' || pg_get_constraintdef(oid) "
                "FROM pg_constraint WHERE conrelid = 'idem_outbox'::regclass",
                "SELECT 'trigger ' || pg_get_triggerdef(oid) FROM pg_trigger "
                "WHERE tgrelid = 'idem_outbox'::regclass AND NOT tgisinternal",
                "SELECT 'sequence ' || pg_get_serial_sequence('idem_outbox', 'id')"}
          : std::vector<const char*>{
                "SELECT 'column ' || name || ' ' || type || ' notnull:' || \"notnull\" || "
                "' default:' || coalesce(dflt_value, '') || ' pk:' || pk "
                "FROM pragma_table_xinfo('idem_outbox') ORDER BY cid",
                "SELECT 'index ' || name || ': ' || coalesce(sql, '(automatic)') "
                "FROM sqlite_master WHERE type = 'index' AND tbl_name = 'idem_outbox'",
                "SELECT 'sequence ' || name FROM sqlite_sequence WHERE name = 'idem_outbox'"};
  std::vector<std::string> lines;
  auto tx = store.begin();
  for (const char* sql : queries) {
    for (const RowView row : tx->execute(sql)) lines.emplace_back(row.text(0));
  }
  tx->rollback();
  std::sort(lines.begin(), lines.end());
  return lines;
}

/// Names of the schema objects (tables, views, indexes, sequences, triggers) whose name
/// contains "outbox", sorted; the trigger function idem_outbox_notify is not listed.
std::vector<std::string> outbox_object_names(Store& store) {
  const char* sql =
      store.backend() == Backend::Postgres
          ? "SELECT relname::text FROM pg_class WHERE relname LIKE '%outbox%' AND "
            "relnamespace = ANY (SELECT oid FROM pg_namespace WHERE nspname = "
            "ANY (current_schemas(false))) UNION ALL SELECT tgname::text FROM pg_trigger "
            "WHERE tgname LIKE '%outbox%' AND NOT tgisinternal"
          : "SELECT name FROM sqlite_master WHERE name LIKE '%outbox%'";
  std::vector<std::string> names;
  auto tx = store.begin();
  for (const RowView row : tx->execute(sql)) names.emplace_back(row.text(0));
  tx->rollback();
  std::sort(names.begin(), names.end());
  return names;
}

template <class Backend>
class SchemaUpgrade : public test::DevBrokerSuite {
 protected:
  void SetUp() override {
    url_ = Backend::fresh_url();
    if (url_.empty()) return;  // skipped (or failed under CI)
    store_ = open_store(url_);
    previous::migrate_as_previous_release(*store_);
    topic_ = test::unique_name("upgrade-orders");
    broker_->create_topic(topic_, 3);
  }

  static const previous::OutboxStatements& old_sql() {
    return previous::outbox_statements(Backend::kind);
  }

  std::int64_t scalar(const std::string& sql) { return Backend::read_scalar(*store_, sql); }

  /// Writes outbox row number `n` on `store` with the previous release's INSERT (its order
  /// service's Outbox::enqueue); returns the row's id.
  std::int64_t old_enqueue(Store& store, int n) {
    const Uuid event_id = new_uuid_v7();
    const std::string key = fmt::format("order-{}", n % 4);
    const std::string payload =
        fmt::format(R"({{"event_id":"{}","n":{}}})", event_id.to_string(), n);
    const std::string headers = fmt::format(R"({{"traceparent":"{}"}})", kTraceparent);
    auto tx = store.begin();
    tx->execute(old_sql().insert, event_id, "order", key, topic_, key,
                static_cast<std::int64_t>(outbox_shard(key)), payload, headers);
    const std::int64_t id =
        tx->execute("SELECT id FROM outbox WHERE event_id = $1", event_id)[0].int64(0);
    tx->commit();
    return id;
  }

  /// Writes an outbox row with this release's Outbox::enqueue; returns its event id.
  Uuid new_enqueue(int n) {
    auto tx = store_->begin();
    const Uuid event_id = outbox_.enqueue(*tx, [&](const Uuid& id) {
      const std::string key = fmt::format("order-{}", n % 4);
      return OutboxMessage{"order",
                           key,
                           topic_,
                           fmt::format(R"({{"event_id":"{}","n":{}}})", id.to_string(), n),
                           {{"traceparent", kTraceparent}},
                           {}};
    });
    tx->commit();
    return event_id;
  }

  /// Runs one of the previous release's statements on `store`, with `params`.
  template <class... Args>
  Rows old(Store& store, std::string_view sql, const Args&... args) {
    const std::array<Param, sizeof...(Args)> params{Param(args)...};
    return run(store, sql, params);
  }

  /// The previous release's id list literal for its mark statement.
  static std::string id_list(const std::vector<std::int64_t>& ids) {
    return Backend::kind == idem::Backend::Postgres ? fmt::format("{{{}}}", fmt::join(ids, ","))
                                                    : fmt::format("[{}]", fmt::join(ids, ","));
  }

  /// A cutoff after every row, in the form of the previous release's maintenance delete.
  static Param far_future_cutoff() {
    return Backend::kind == idem::Backend::Postgres ? Param("2100-01-01T00:00:00Z")
                                                    : Param(std::int64_t{4'102'444'800'000});
  }

  /// Every outbox row, one line each, from `table` (before the upgrade `outbox`, after it
  /// `idem_outbox`).
  std::vector<std::string> rows_of(const std::string& table) {
    std::vector<std::string> lines;
    for (const RowView row :
         run(*store_,
             "SELECT id, event_id, topic, message_key, payload, headers, published_at "
             "IS NOT NULL, rejected_at IS NOT NULL, rejected_reason FROM " +
                 table + " ORDER BY id")) {
      lines.push_back(fmt::format("{} {} {} {} {} {} published={} rejected={} {}", row.int64(0),
                                  row.uuid(1).to_string(), row.text(2), row.text(3), row.text(4),
                                  row.text(5), row.boolean(6), row.boolean(7),
                                  row.is_null(8) ? "-" : row.text(8)));
    }
    return lines;
  }

  RelayConfig relay_config() const {
    RelayConfig c;
    c.store_url = url_;
    c.producer.bootstrap_servers = broker_->bootstrap_servers();
    c.producer.kafka = {{"log_level", "2"}};
    c.poll_interval = 50ms;
    c.rebalance_interval = 200ms;
    c.progress_interval = 0ms;
    return c;
  }

  test::CliResult cli(std::vector<std::string> args) {
    args.insert(args.end(), {"--db", url_});
    return test::run_to_completion(IDEM_CLI_PATH, args);
  }

  std::string url_;
  std::string topic_;
  std::unique_ptr<Store> store_;
  Outbox outbox_;
};

TYPED_TEST_SUITE(SchemaUpgrade, test::AllBackends, test::BackendName);

TYPED_TEST(SchemaUpgrade, KeepsTheRowsAndTheRelayPublishesThem) {
  if (this->url_.empty()) return;
  IDEM_REQUIRE_CLI();
  Store& store = *this->store_;
  // What the previous release left: rows its relay published, one it rejected, six
  // waiting; the newest row published and then deleted by its `idem maintain`, so the
  // id sequence is ahead of every row left.
  std::vector<std::int64_t> ids;
  for (int n = 1; n <= 10; ++n) ids.push_back(this->old_enqueue(store, n));
  this->old(store, this->old_sql().mark, this->id_list({ids[0], ids[1], ids[9]}));
  this->old(store, this->old_sql().reject, ids[2], "Broker: Message size too large");
  this->old(store, this->old_sql().maintenance_delete, this->far_future_cutoff(), 100);
  for (const char* who : {"ada", "grace"}) {
    this->old(store, previous::kInsertReplayAudit, std::int64_t{1'700'000'000'000}, who,
              "127.0.0.1", "orders.dlq", 0, std::int64_t{41}, Param(nullptr), "orders", "");
  }
  const std::vector<std::string> before = this->rows_of("outbox");
  ASSERT_EQ(before.size(), 7U);

  // The upgrade, as an operator runs it; and again, which changes nothing.
  const test::CliResult migrated = this->cli({"migrate"});
  ASSERT_EQ(migrated.status, 0) << migrated.output;
  const int rename = TypeParam::kind == Backend::Postgres
                         ? detail::postgres_sql::kOutboxRenameVersion
                         : detail::sqlite_sql::kOutboxRenameVersion;
  EXPECT_NE(migrated.output.find(fmt::format("applied {:04}_idem_outbox", rename)),
            std::string::npos)
      << migrated.output;
  const test::CliResult again = this->cli({"migrate"});
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("schema is up to date"), std::string::npos) << again.output;
  EXPECT_EQ(store.schema_version(), detail::known_idem_schema_version(TypeParam::kind));
  EXPECT_EQ(store.schema_version("console"), 1);

  // Every row kept as it was, under the new name and through the view.
  EXPECT_EQ(this->rows_of("idem_outbox"), before);
  EXPECT_EQ(this->rows_of("outbox"), before);
  const auto audit = console::list_replay_audit(store, 10);
  ASSERT_EQ(audit.size(), 2U);
  EXPECT_EQ(audit[0].operator_name, "grace");
  EXPECT_EQ(audit[1].operator_name, "ada");
  EXPECT_EQ(audit[1].dlq_offset, 41);
  EXPECT_EQ(audit[1].outcome, "started");

  // A row written now continues the sequence past the deleted newest row.
  const Uuid fresh = this->new_enqueue(11);
  const Rows fresh_id =
      run(store, "SELECT id FROM idem_outbox WHERE event_id = $1", std::array<Param, 1>{fresh});
  ASSERT_EQ(fresh_id.size(), 1U);
  EXPECT_GT(fresh_id[0].int64(0), ids[9]) << "an id of a deleted row would be used again";

  // This release's relay publishes the six waiting rows and the new one, each once, as
  // the previous release's would have: key, payload, event_id and stored headers.
  std::map<std::string, std::vector<std::string>> expected;  // event id -> key, payload
  for (const RowView row : run(store,
                               "SELECT event_id, message_key, payload FROM idem_outbox "
                               "WHERE published_at IS NULL AND rejected_at IS NULL")) {
    expected[row.uuid(0).to_string()] = {std::string(row.text(1)), std::string(row.text(2))};
  }
  ASSERT_EQ(expected.size(), 7U);
  {
    Relay relay(this->relay_config());
    ASSERT_TRUE(relay.run_until_empty(60s));
    EXPECT_EQ(relay.progress().published, 7U);
  }
  const auto records =
      test::read_topic(this->broker_->bootstrap_servers(), this->topic_, 3, expected.size(), 30s);
  ASSERT_EQ(records.size(), expected.size());
  for (const auto& r : records) {
    const std::string event_id = r.header("event_id").value_or("");
    const auto it = expected.find(event_id);
    ASSERT_NE(it, expected.end()) << "published a row it should not have: " << r.payload;
    EXPECT_EQ(r.key, it->second[0]);
    EXPECT_EQ(r.payload, it->second[1]);
    EXPECT_EQ(r.header("traceparent").value_or(""), kTraceparent);
    expected.erase(it);
  }
  EXPECT_EQ(this->scalar("SELECT count(*) FROM idem_outbox WHERE published_at IS NULL"), 1)
      << "only the rejected row waits";

  // The rejected row: listed and requeued by `idem outbox`, then published.
  const test::CliResult listed = this->cli({"outbox", "rejected"});
  ASSERT_EQ(listed.status, 0) << listed.output;
  EXPECT_NE(listed.output.find("Message size too large"), std::string::npos) << listed.output;
  const test::CliResult requeued = this->cli({"outbox", "requeue", std::to_string(ids[2])});
  ASSERT_EQ(requeued.status, 0) << requeued.output;
  {
    Relay relay(this->relay_config());
    ASSERT_TRUE(relay.run_until_empty(60s));
    EXPECT_EQ(relay.progress().published, 1U);
  }
  EXPECT_EQ(this->scalar("SELECT count(*) FROM idem_outbox WHERE published_at IS NULL"), 0);
}

TYPED_TEST(SchemaUpgrade, PreviousReleaseStatementsWorkThroughTheView) {
  if (this->url_.empty()) return;
  const auto& sql = this->old_sql();
  // A process of the previous release, running across the upgrade: its connection was
  // opened, and its claim prepared, before the table was renamed.
  auto old_process = open_store(this->url_);
  std::vector<std::int64_t> old_ids;
  for (int n = 1; n <= 3; ++n) old_ids.push_back(this->old_enqueue(*old_process, n));
  std::vector<int> shards(kOutboxShards);
  std::iota(shards.begin(), shards.end(), 0);
  const auto claim = [&](Store& s) {
    return TypeParam::kind == Backend::Postgres
               ? this->old(s, sql.claim, std::int64_t{0},
                           fmt::format("{{{}}}", fmt::join(shards, ",")), std::int64_t{100})
               : this->old(s, sql.claim, std::int64_t{0}, std::int64_t{100});
  };
  ASSERT_EQ(claim(*old_process).size(), 3U);

  static_cast<void>(open_store(this->url_)->migrate());

  // New rows from this release's order service, one more from the previous release's.
  const Uuid new_first = this->new_enqueue(4);
  const Uuid new_second = this->new_enqueue(5);
  old_ids.push_back(this->old_enqueue(*old_process, 6));
  EXPECT_EQ(this->scalar("SELECT count(*) FROM idem_outbox WHERE created_at IS NOT NULL AND "
                         "headers IS NOT NULL"),
            6)
      << "a row inserted through the view takes the table's defaults";

  // The previous release's relay claims all of them, in id order.
  const Rows claimed = claim(*old_process);
  ASSERT_EQ(claimed.size(), 6U);
  std::vector<std::int64_t> claimed_ids;
  for (const RowView row : claimed) claimed_ids.push_back(row.int64(0));
  EXPECT_TRUE(std::is_sorted(claimed_ids.begin(), claimed_ids.end()));
  EXPECT_EQ(claimed[3].uuid(1), new_first);
  EXPECT_EQ(claimed[4].uuid(1), new_second);
  EXPECT_EQ(claimed[5].int64(0), old_ids[3]);
  EXPECT_NE(std::string(claimed[3].text(5)).find(kTraceparent), std::string::npos);

  // It marks four of them, rejects one and requeues it, and reads its lag.
  this->old(*old_process, sql.mark,
            this->id_list({claimed_ids[0], claimed_ids[1], claimed_ids[2], claimed_ids[3]}));
  EXPECT_EQ(this->scalar("SELECT count(*) FROM idem_outbox WHERE published_at IS NOT NULL"), 4);
  this->old(*old_process, sql.reject, claimed_ids[4], "Broker: Unknown topic or partition");
  const Rows rejected = this->old(*old_process, sql.list_rejected, std::int64_t{10});
  ASSERT_EQ(rejected.size(), 1U);
  EXPECT_EQ(rejected[0].int64(0), claimed_ids[4]);
  ASSERT_EQ(list_rejected_outbox_rows(*this->store_).size(), 1U) << "this release sees it too";
  const Rows lag = this->old(*old_process, sql.lag);
  EXPECT_EQ(lag[0].int64(0), 1);
  EXPECT_GE(lag[0].int64(1), 0);
  EXPECT_EQ(lag[0].int64(2), 1);
  this->old(*old_process, sql.requeue, claimed_ids[4]);
  EXPECT_TRUE(list_rejected_outbox_rows(*this->store_).empty());

  // Its cleanup and its `idem maintain` delete published rows through the view.
  this->old(*old_process, sql.delete_published, std::int64_t{-60'000}, std::int64_t{2});
  EXPECT_EQ(this->scalar("SELECT count(*) FROM idem_outbox"), 4);
  this->old(*old_process, sql.maintenance_delete, this->far_future_cutoff(), std::int64_t{100});
  EXPECT_EQ(this->scalar("SELECT count(*) FROM idem_outbox"), 2);
  EXPECT_EQ(this->scalar("SELECT count(*) FROM idem_outbox WHERE published_at IS NULL"), 2);
}

TYPED_TEST(SchemaUpgrade, UpgradedStoreHasTheSchemaOfANewStore) {
  if (this->url_.empty()) return;
  static_cast<void>(this->store_->migrate());
  const std::string fresh_url = TypeParam::fresh_url();
  if (fresh_url.empty()) return;
  auto fresh = open_store(fresh_url);
  static_cast<void>(fresh->migrate());
  // (the id sequence exists on SQLite once a row was written)
  static_cast<void>(this->old_enqueue(*this->store_, 1));
  {
    auto tx = fresh->begin();
    Outbox().enqueue(
        *tx, [&](const Uuid&) { return OutboxMessage{"order", "1", this->topic_, "{}", {}, {}}; });
    tx->commit();
  }
  EXPECT_EQ(outbox_schema(*this->store_), outbox_schema(*fresh));

  // Only the names differ: the upgraded store also has the view (and, on SQLite, the
  // triggers that carry writes through it).
  const std::vector<std::string> fresh_names = outbox_object_names(*fresh);
  for (const std::string& name : fresh_names) {
    EXPECT_TRUE(name.starts_with("idem_outbox") || name.starts_with("sqlite_autoindex_idem_outbox"))
        << name;
  }
  std::vector<std::string> upgraded_names = outbox_object_names(*this->store_);
  std::vector<std::string> compatibility;
  std::set_difference(upgraded_names.begin(), upgraded_names.end(), fresh_names.begin(),
                      fresh_names.end(), std::back_inserter(compatibility));
  const std::vector<std::string> expected =
      TypeParam::kind == Backend::Postgres
          ? std::vector<std::string>{"outbox"}
          : std::vector<std::string>{"idem_outbox_view_delete", "idem_outbox_view_insert",
                                     "idem_outbox_view_update", "outbox"};
  EXPECT_EQ(compatibility, expected);
  EXPECT_TRUE(std::includes(upgraded_names.begin(), upgraded_names.end(), fresh_names.begin(),
                            fresh_names.end()));
}

TYPED_TEST(SchemaUpgrade, NewStoreRecordsEveryVersionOfThePreviousRelease) {
  if (this->url_.empty()) return;
  // The previous release's migrate() on a store of this release then finds nothing to
  // apply (and cannot create the console's table a second time); its processes refuse
  // the store as migrated by a newer idem, as before.
  const std::string url = TypeParam::fresh_url();
  if (url.empty()) return;
  auto store = open_store(url);
  static_cast<void>(store->migrate());
  const auto& old_migrations = TypeParam::kind == Backend::Postgres
                                   ? previous::postgres_migrations()
                                   : previous::sqlite_migrations();
  for (const SchemaMigration& m : old_migrations) {
    EXPECT_EQ(TypeParam::read_scalar(
                  *store, fmt::format("SELECT count(*) FROM idem_schema_migrations WHERE "
                                      "migration_set = 'idem' AND version = {}",
                                      m.version)),
              1)
        << m.name;
  }
  EXPECT_GT(store->schema_version(), old_migrations.back().version);
}

TYPED_TEST(SchemaUpgrade, NewStoreLeavesAnApplicationsOwnOutboxAlone) {
  if (this->url_.empty()) return;
  const std::string url = TypeParam::fresh_url();
  if (url.empty()) return;
  auto store = open_store(url);
  run(*store, "CREATE TABLE outbox (id INTEGER PRIMARY KEY, note TEXT NOT NULL)");
  run(*store, "INSERT INTO outbox (id, note) VALUES (1, 'the application''s own')");
  static_cast<void>(store->migrate());
  static_cast<void>(store->migrate_set(console_migrations()));
  EXPECT_EQ(TypeParam::read_scalar(*store, "SELECT count(*) FROM outbox WHERE note <> ''"), 1);
  EXPECT_EQ(TypeParam::read_scalar(*store, "SELECT count(*) FROM idem_outbox"), 0);
  EXPECT_EQ(TypeParam::read_scalar(*store, "SELECT count(*) FROM idem_console_replay"), 0);
}

TEST(SchemaUpgradeMigrations, TheStoresSkipTheRenameOnlyForTheRenameMigration) {
  const auto name_of = [](const std::vector<SchemaMigration>& list, int version) {
    for (const SchemaMigration& m : list) {
      if (m.version == version) return std::string(m.name);
    }
    return std::string();
  };
  EXPECT_EQ(name_of(detail::postgres_sql::migrations(), detail::postgres_sql::kOutboxRenameVersion),
            "0006_idem_outbox");
  EXPECT_EQ(name_of(detail::sqlite_sql::migrations(), detail::sqlite_sql::kOutboxRenameVersion),
            "0007_idem_outbox");
}

#ifdef IDEM_TEST_HAVE_POSTGRES_BACKEND
using SchemaUpgradePostgres = SchemaUpgrade<test::PostgresBackend>;

/// Notifications received on `conn` so far (LISTEN must have been issued on it).
int notifications(PGconn* conn) {
  int n = 0;
  if (PQconsumeInput(conn) == 0) return -1;
  while (PGnotify* note = PQnotifies(conn)) {
    ++n;
    PQfreemem(note);
  }
  return n;
}

TEST_F(SchemaUpgradePostgres, RelayListeningBeforeTheUpgradeIsWokenByEveryWriter) {
  if (this->url_.empty()) return;
  auto listener = open_store(this->url_);
  static_cast<void>(run(*listener, "SELECT 1"));  // connected
  PGconn* conn = postgres_native_handle(*listener);
  PGresult* r = PQexec(conn, std::string(previous::kListen).c_str());
  ASSERT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQerrorMessage(conn);
  PQclear(r);
  static_cast<void>(this->store_->migrate());

  int woken = 0;
  this->old_enqueue(*this->store_, 1);  // through the view
  EXPECT_TRUE(test::eventually([&] { return (woken += notifications(conn)) >= 1; }, 10s));
  this->new_enqueue(2);  // into idem_outbox
  EXPECT_TRUE(test::eventually([&] { return (woken += notifications(conn)) >= 2; }, 10s));
}

TEST_F(SchemaUpgradePostgres, RolesKeepTheirPrivilegesUnderBothNames) {
  if (this->url_.empty()) return;
  const std::string relay_role = test::unique_name("idem_old_relay");
  const std::string other_role = test::unique_name("idem_other");
  for (const std::string& role : {relay_role, other_role}) {
    run(*this->store_, fmt::format("CREATE ROLE \"{}\" NOLOGIN", role));
  }
  run(*this->store_,
      fmt::format("GRANT SELECT, INSERT, UPDATE, DELETE ON outbox TO \"{}\"", relay_role));
  static_cast<void>(this->store_->migrate());

  const auto& sql = this->old_sql();
  const auto as_role = [&](const std::string& role, const auto& work) {
    auto tx = this->store_->begin();
    tx->execute(fmt::format("SET LOCAL ROLE \"{}\"", role));
    work(*tx);
    tx->commit();
  };
  as_role(relay_role, [&](Transaction& tx) {
    const Uuid id = new_uuid_v7();
    tx.execute(sql.insert, id, "order", "k", this->topic_, "k",
               static_cast<std::int64_t>(outbox_shard("k")), "{}", "{}");
    EXPECT_EQ(tx.execute(sql.claim, std::int64_t{0}, "{" + std::to_string(outbox_shard("k")) + "}",
                         std::int64_t{10})
                  .size(),
              1U);
    tx.execute(sql.mark, "{1}");
    EXPECT_EQ(
        tx.execute("SELECT count(*) FROM idem_outbox WHERE published_at IS NOT NULL")[0].int64(0),
        1)
        << "the grants on the table followed it to its new name";
  });
  EXPECT_THROW(
      as_role(other_role, [&](Transaction& tx) { tx.execute("SELECT count(*) FROM outbox"); }),
      Error)
      << "a role the table never granted gets nothing through the view";
  for (const std::string& role : {relay_role, other_role}) {
    run(*this->store_, fmt::format("DROP OWNED BY \"{}\"", role));
    run(*this->store_, fmt::format("DROP ROLE \"{}\"", role));
  }
}
#endif

}  // namespace schema_upgrade_test
}  // namespace idem
