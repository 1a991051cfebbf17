// The PostgreSQL dedup store (libpq).
//
// Transactions run at READ COMMITTED, PostgreSQL's default, on purpose: the dedup
// mark is INSERT ... ON CONFLICT DO NOTHING, and at READ COMMITTED a concurrent
// insert of the same key makes the second inserter wait for the first and then
// either conflict (first committed: "not new") or insert (first rolled back: "new").
// That is exactly the race-safe check IDEM-2 asks for, without the serialization
// failures REPEATABLE READ / SERIALIZABLE would add for the same race. Business
// SQL that needs stronger isolation can SET TRANSACTION as its first statement.
//
// This file: the store, its migrations and its factories. The transaction is in
// pg_transaction.cpp, the dedup marks in pg_marks.cpp.
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/stores/postgres.hpp"
#include "stores/migration.hpp"
#include "stores/postgres/pg_partitions.hpp"
#include "stores/postgres/pg_store.hpp"

namespace idem {
namespace detail::pg {
namespace {

// pg_advisory_xact_lock key that serialises concurrent migrators: "idem-mig" as
// a big-endian int64. Any constant works; this one is recognisable in pg_locks.
constexpr std::int64_t kMigrationLockKey = 7594306391241484647;

constexpr const char* kMarkOneSql =
    "INSERT INTO processed_event (event_id, consumer_group) VALUES ($1, $2) "
    "ON CONFLICT DO NOTHING";
// One statement for the whole batch; RETURNING names the ids that were new.
constexpr const char* kMarkBatchSql =
    "INSERT INTO processed_event (event_id, consumer_group) "
    "SELECT unnest($1::uuid[]), $2 ON CONFLICT DO NOTHING RETURNING event_id";

}  // namespace

PostgresStore::PostgresStore(std::string_view conninfo, const StoreOptions& options)
    : conninfo_(conninfo), options_(options), conn_(conninfo, options) {
  mark_one_.name = "idem_mark";
  mark_one_.sql = kMarkOneSql;
  // event_id binary (16 bytes, no parsing on the server), consumer_group text.
  mark_one_.types = {kUuidOid, kTextOid};
  mark_batch_.name = "idem_mark_batch";
  mark_batch_.sql = kMarkBatchSql;
  mark_batch_.types = {kUuidArrayOid, kTextOid};
}

std::unique_ptr<Store> PostgresStore::connect_again() const {
  return std::make_unique<PostgresStore>(conninfo_, options_);
}

std::unique_ptr<Transaction> PostgresStore::begin() {
  if (active_ != nullptr) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                "postgres: a transaction is already open on this store (a Store is one "
                "connection; open one Store per concurrent transaction)");
  }
  conn_.ensure_ready();  // reconnects once if the connection broke
  auto tx = std::make_unique<PostgresTransaction>(*this);
  active_ = tx.get();
  return tx;
}

// ---------------------------------------------------------------------------
// PostgresStore: migrations

Result PostgresStore::query(const char* sql, std::span<const char* const> params,
                            const char* what) {
  Result r(PQexecParams(conn_.native(), sql, static_cast<int>(params.size()), nullptr,
                        params.data(), nullptr, nullptr, 0));
  if (!ok_status(r.get())) conn_.fail(r.get(), what);
  return r;
}

// Checks processed_event against what migration 1 would create. Runs under the
// migration lock, inside the migration transaction.
void PostgresStore::check_processed_event(const MigrateOptions& options, bool recorded) {
  const Result r = query(
      "SELECT c.relkind::text, CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END "
      "FROM pg_class c WHERE c.oid = to_regclass('processed_event')",
      {}, "inspect processed_event");
  if (PQntuples(r.get()) == 0) {
    if (recorded) {
      throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                  "postgres: idem_schema_migrations records migration 1 but table "
                  "processed_event is missing (dropped by hand?)");
    }
    return;  // migration 1 creates it
  }
  const std::string relkind = PQgetvalue(r.get(), 0, 0);
  const std::string partkey = PQgetisnull(r.get(), 0, 1) ? "" : PQgetvalue(r.get(), 0, 1);
  if (relkind == "p" && partkey != "RANGE (event_id)") {
    // The design documents' DDL partitions by processed_at, which forces
    // processed_at into the primary key: a redelivery at a later time inserts a
    // second row and the effect runs twice. Refuse to run on such a table.
    throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                fmt::format("postgres: processed_event is partitioned by {}; idem needs RANGE "
                            "(event_id) so that the primary key stays (event_id, "
                            "consumer_group) (IDEM-2 TTL, docs/rules.md)",
                            partkey));
  }
  if (options.partitioned && relkind != "p") {
    throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                "postgres: migrate(partitioned=true), but processed_event already exists as a "
                "plain table; a table cannot be partitioned in place. Migrate with "
                "partitioned=false, or move the rows into a new partitioned table by hand");
  }
  if (!recorded) {
    throw Error(ErrorCode::Schema, ErrorSource::Postgres,
                "postgres: table processed_event exists but idem_schema_migrations does not "
                "record migration 1; it was not created by idem. Drop or rename it, or record "
                "version 1 if it matches sql/postgres/0001_processed_event.sql");
  }
}

bool PostgresStore::relation_exists(const char* name) {
  const char* params[1] = {name};
  const Result r = query("SELECT to_regclass($1) IS NOT NULL", params, "migrate: look for a table");
  return std::strcmp(PQgetvalue(r.get(), 0, 0), "t") == 0;
}

MigrationReport PostgresStore::migrate(const MigrateOptions& options) {
  return apply_migrations(kIdemMigrations, postgres_sql::migrations(), &options);
}

MigrationReport PostgresStore::migrate_set(const MigrationSet& set) {
  check_migration_set_name(set.name, "postgres");
  return apply_migrations(set.name, set.postgres, nullptr);
}

// `options` is set for idem's own migrations only: migration 1 (processed_event) is
// checked against what is there and may be created partitioned.
MigrationReport PostgresStore::apply_migrations(std::string_view set,
                                                std::span<const SchemaMigration> migrations,
                                                const MigrateOptions* options) {
  if (active_ != nullptr) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                "postgres: migrate() while a transaction is open on this store");
  }
  const Clock& clock =
      options != nullptr && options->clock != nullptr ? *options->clock : SystemClock::instance();
  if (options != nullptr && options->partitioned) {
    // Validate before touching the database.
    (void)plan_partitions(*options, clock.now());
  }
  const std::string set_name(set);
  conn_.ensure_ready();

  // Each step is its own transaction holding the migration lock, so concurrent
  // migrators (several consumers starting at once) run one after the other and
  // the later ones find the work done.
  class Tx {
   public:
    explicit Tx(PostgresStore& s) : s_(s) {
      s_.query("BEGIN", {}, "migrate: BEGIN");
      open_ = true;
      const std::string key = std::to_string(kMigrationLockKey);
      const char* params[1] = {key.c_str()};
      s_.query("SELECT pg_advisory_xact_lock($1::bigint)", params,
               "migrate: take the migration lock");
    }
    Tx(const Tx&) = delete;
    Tx& operator=(const Tx&) = delete;
    ~Tx() {
      if (open_) {
        const Result r(PQexec(s_.conn_.native(), "ROLLBACK"));
        if (!ok_status(r.get())) s_.conn_.poison();
      }
    }
    void commit() {
      open_ = false;
      s_.query("COMMIT", {}, "migrate: COMMIT");
    }

   private:
    PostgresStore& s_;
    bool open_ = false;
  };

  MigrationReport report;
  {
    Tx tx(*this);
    query(
        "CREATE TABLE IF NOT EXISTS idem_schema_migrations ("
        "migration_set text NOT NULL, "
        "version int NOT NULL, "
        "name text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (migration_set, version))",
        {}, "migrate: create idem_schema_migrations");
    const char* set_param[1] = {set_name.c_str()};
    const Result r = query(
        "SELECT coalesce(max(version), 0) FROM idem_schema_migrations WHERE migration_set = $1",
        set_param, "migrate: read the schema version");
    report.from_version = std::atoi(PQgetvalue(r.get(), 0, 0));
    tx.commit();
  }

  for (const SchemaMigration& m : migrations) {
    Tx tx(*this);
    const std::string version = std::to_string(m.version);
    const char* params[2] = {set_name.c_str(), version.c_str()};
    const Result applied = query(
        "SELECT name FROM idem_schema_migrations WHERE migration_set = $1 AND version = $2::int",
        params, "migrate: read the applied migrations");
    const bool recorded = PQntuples(applied.get()) > 0;
    const bool processed_event_migration = options != nullptr && m.version == 1;
    if (processed_event_migration) check_processed_event(*options, recorded);
    if (recorded) {
      tx.commit();
      continue;
    }
    std::string name(m.name);
    std::string ddl;
    if (processed_event_migration && options->partitioned) {
      ddl = partitioned_processed_event_ddl(*options, clock.now());
      name = kPartitionedMigrationName;
    } else {
      ddl = std::string(m.sql);
    }
    // A store created with idem_outbox has no older `outbox` to rename (migration.hpp).
    const bool nothing_to_rename = options != nullptr &&
                                   m.version == postgres_sql::kOutboxRenameVersion &&
                                   relation_exists(kOutboxTable);
    if (!nothing_to_rename) {
      // Simple-query protocol: a migration file holds several statements; they run
      // inside this transaction, so a failing one leaves nothing behind.
      const Result r = conn_.exec_simple(ddl.c_str());
      if (!ok_status(r.get())) conn_.fail(r.get(), fmt::format("migration {} of '{}'", name, set));
    }
    const char* record[3] = {set_name.c_str(), version.c_str(), name.c_str()};
    query(
        "INSERT INTO idem_schema_migrations (migration_set, version, name) "
        "VALUES ($1, $2::int, $3)",
        record, "migrate: record the migration");
    tx.commit();
    report.applied.push_back(name);
  }

  report.to_version = schema_version(set);
  return report;
}

int PostgresStore::schema_version(std::string_view set) {
  if (active_ == nullptr) conn_.ensure_ready();
  const Result exists =
      query("SELECT to_regclass('idem_schema_migrations') IS NOT NULL", {}, "schema_version");
  if (std::strcmp(PQgetvalue(exists.get(), 0, 0), "t") != 0) return 0;
  const std::string set_name(set);
  const char* params[1] = {set_name.c_str()};
  const Result r =
      query("SELECT coalesce(max(version), 0) FROM idem_schema_migrations WHERE migration_set = $1",
            params, "schema_version");
  return std::atoi(PQgetvalue(r.get(), 0, 0));
}

}  // namespace detail::pg

std::unique_ptr<Store> make_postgres_store(std::string_view conninfo, const StoreOptions& options) {
  return std::make_unique<detail::pg::PostgresStore>(conninfo, options);
}

pg_conn* postgres_native_handle(Store& store) {
  auto* pg = dynamic_cast<detail::pg::PostgresStore*>(&store);
  if (pg == nullptr) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                fmt::format("postgres_native_handle: the store is a {} store, not PostgreSQL",
                            to_string(store.backend())));
  }
  return pg->native();
}

}  // namespace idem
