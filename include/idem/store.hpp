#pragma once
/// \file
/// The dedup store: a small interface that hands out transactions in which the
/// dedup mark and the business effect commit or roll back together (IDEM-2, IDEM-3).

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "idem/amount.hpp"
#include "idem/clock.hpp"
#include "idem/timestamp.hpp"
#include "idem/uuid.hpp"

namespace idem {

/// A bound SQL parameter. Placeholders are written `$1`, `$2`, ... on every backend.
///
/// Binding: integers, reals and text bind natively. A Uuid binds as text on
/// PostgreSQL (cast by the server to `uuid`) and as a 16-byte BLOB on SQLite
/// (idem's SQLite schema stores UUIDs that way). An Amount binds as its canonical
/// decimal text ("12.30"), which PostgreSQL reads into `numeric` and SQLite keeps
/// exact in a TEXT column. A Timestamp binds as RFC 3339 text.
class Param {
 public:
  using Value = std::variant<std::monostate, std::int64_t, double, bool, std::string, Uuid>;

  Param(std::nullptr_t) noexcept {}                                // NOLINT
  Param(std::int64_t v) noexcept : value_(v) {}                    // NOLINT
  Param(int v) noexcept : value_(static_cast<std::int64_t>(v)) {}  // NOLINT
  Param(double v) noexcept : value_(v) {}                          // NOLINT
  Param(bool v) noexcept : value_(v) {}                            // NOLINT
  Param(std::string_view v) : value_(std::string(v)) {}            // NOLINT
  Param(const std::string& v) : value_(v) {}                       // NOLINT
  Param(const char* v) : value_(std::string(v)) {}                 // NOLINT
  Param(const Uuid& v) noexcept : value_(v) {}                     // NOLINT
  Param(const Amount& v) : value_(v.to_string()) {}                // NOLINT
  Param(Timestamp v);                                              // NOLINT
  template <class T>
  Param(const std::optional<T>& v) : Param(v ? Param(*v) : Param(nullptr)) {}  // NOLINT

  [[nodiscard]] const Value& value() const noexcept { return value_; }
  [[nodiscard]] bool is_null() const noexcept { return value_.index() == 0; }

 private:
  Value value_;
};

/// What a result's values are, as the backend describes them, so that a caller that does
/// not know the schema (a binding to another language, a generic tool) can give each value
/// its natural type. PostgreSQL types a column (the OID of its type); SQLite types each
/// value (its storage class), refined by the column's declared type where the statement
/// reads a table column (sqlite3_column_decltype). RowView::type() gives a cell's.
enum class ValueType : std::uint8_t {
  Null,            ///< a NULL cell (only a cell's type, never a column's)
  Integer,         ///< int2, int4, int8, oid; SQLite INTEGER
  Decimal,         ///< numeric: exact decimal text (SQLite has no exact decimal type)
  Real,            ///< float4, float8; SQLite REAL
  Boolean,         ///< bool ("t"/"f"); SQLite INTEGER in a column declared BOOLEAN or BOOL
  UuidValue,       ///< uuid; SQLite TEXT or a 16-byte BLOB in a column declared UUID
  TimestampValue,  ///< timestamp, timestamptz; SQLite TEXT in a column declared TIMESTAMP, DATETIME
  Json,            ///< json, jsonb; SQLite TEXT in a column declared JSON
  Bytes,           ///< bytea (its text form: `\x` and hex digits); SQLite BLOB (the raw bytes)
  Text,            ///< anything else, as the backend prints it
};
[[nodiscard]] std::string_view to_string(ValueType type) noexcept;

/// A result column: its name as the statement gives it (the column's, or its `AS` alias)
/// and the type of its values (for SQLite, of the values its declared type does not
/// decide: ValueType::Text, and RowView::type() tells each cell's).
struct Column {
  std::string name;
  ValueType type = ValueType::Text;
};

/// One row of a result; a view into Rows, valid while the Rows lives.
class RowView {
 public:
  RowView(const class Rows& rows, std::size_t row) noexcept : rows_(&rows), row_(row) {}

  [[nodiscard]] std::size_t size() const noexcept;
  [[nodiscard]] bool is_null(std::size_t col) const;
  /// The raw cell: PostgreSQL text format, or SQLite's value as text (BLOBs as raw bytes).
  /// Throws Error(Query) for a NULL cell or a column out of range.
  [[nodiscard]] std::string_view text(std::size_t col) const;
  [[nodiscard]] std::int64_t int64(std::size_t col) const;  ///< throws if not an integer
  [[nodiscard]] double real(std::size_t col) const;         ///< throws if not a number
  [[nodiscard]] Uuid uuid(std::size_t col) const;           ///< accepts text or 16-byte blob
  [[nodiscard]] Amount amount(std::size_t col) const;       ///< exact decimal text
  [[nodiscard]] bool boolean(std::size_t col) const;        ///< t/f, true/false, 1/0
  /// The type of this cell's value: ValueType::Null for NULL, the column's type on
  /// PostgreSQL, the value's own on SQLite. Throws Error(Query) for a column out of range.
  [[nodiscard]] ValueType type(std::size_t col) const;

 private:
  const class Rows* rows_;
  std::size_t row_;
};

/// The result of a statement: rows (possibly none) and the number of rows it changed.
class Rows {
 public:
  Rows() = default;
  /// `value_types`: one per cell (row-major) when the backend types each value (SQLite);
  /// empty when every value of a column has the column's type (PostgreSQL).
  Rows(std::vector<Column> columns, std::vector<std::optional<std::string>> cells,
       std::int64_t affected, std::vector<ValueType> value_types = {})
      : columns_(columns.size()),
        column_info_(std::move(columns)),
        cells_(std::move(cells)),
        value_types_(std::move(value_types)),
        affected_(affected) {}

  [[nodiscard]] std::size_t size() const noexcept {
    return columns_ ? cells_.size() / columns_ : 0;
  }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] std::size_t columns() const noexcept { return columns_; }
  /// Each column's name and type, in the statement's order.
  [[nodiscard]] const std::vector<Column>& column_info() const noexcept { return column_info_; }
  /// The index of the first column named `name` (exactly as the statement names it).
  [[nodiscard]] std::optional<std::size_t> column_index(std::string_view name) const noexcept;
  /// The type of cell (row, col); see RowView::type().
  [[nodiscard]] ValueType type(std::size_t row, std::size_t col) const;
  /// Rows inserted, updated or deleted by the statement.
  [[nodiscard]] std::int64_t affected() const noexcept { return affected_; }
  [[nodiscard]] RowView operator[](std::size_t row) const noexcept { return RowView(*this, row); }
  [[nodiscard]] const std::optional<std::string>& cell(std::size_t row, std::size_t col) const;

  class Iterator {
   public:
    Iterator(const Rows& rows, std::size_t i) noexcept : rows_(&rows), i_(i) {}
    RowView operator*() const noexcept { return (*rows_)[i_]; }
    Iterator& operator++() noexcept {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& o) const noexcept { return i_ != o.i_; }

   private:
    const Rows* rows_;
    std::size_t i_;
  };
  [[nodiscard]] Iterator begin() const noexcept { return {*this, 0}; }
  [[nodiscard]] Iterator end() const noexcept { return {*this, size()}; }

 private:
  std::size_t columns_ = 0;
  std::vector<Column> column_info_;
  std::vector<std::optional<std::string>> cells_;  // row-major
  std::vector<ValueType> value_types_;             // row-major, or empty: the column's type
  std::int64_t affected_ = 0;
};

/// A database transaction. It can be neither copied nor moved; destroying it
/// without commit() rolls it back. Dedup marks, business SQL and (later) outbox
/// rows all go through the same handle, so they commit or roll back together.
///
/// Not thread-safe: one thread uses a transaction at a time.
/// Every method that talks to the database throws idem::Error on failure.
class Transaction {
 public:
  Transaction() = default;
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Transaction(Transaction&&) = delete;
  Transaction& operator=(Transaction&&) = delete;
  virtual ~Transaction() = default;

  /// Runs one statement with bound parameters (`$1`, `$2`, ...); values are never
  /// spliced into the SQL text. Statements are prepared once per connection and cached.
  template <class... Args>
  Rows execute(std::string_view sql, const Args&... args) {
    const std::array<Param, sizeof...(Args)> params{Param(args)...};
    return execute_params(sql, params);
  }
  virtual Rows execute_params(std::string_view sql, std::span<const Param> params) = 0;

  /// Runs one statement whose result the caller does not need (an INSERT or UPDATE of
  /// an effect). PostgreSQL queues it and sends it, with everything queued before it, in
  /// one pipeline ahead of the next synchronous call, so many deferred statements cost
  /// one round trip. Order is kept: a later execute() or mark sees their effects. Their
  /// errors surface at the next sync(), execute(), mark or commit() of this transaction,
  /// as that call's exception (the message names the deferred statement); rolling back
  /// (to a savepoint made before them, or the whole transaction) discards them, errors
  /// included. SQLite runs the statement at once (its errors surface here).
  /// PostgreSQL sends consecutive deferred INSERTs of one text (`INSERT INTO t (cols)
  /// VALUES ($1, $2::type, ...)`, optionally `ON CONFLICT ... DO NOTHING`; nothing else in
  /// the VALUES) as multi-row INSERTs: same rows, same order, but a FOR EACH STATEMENT
  /// trigger fires once per merged statement, and one bad row fails the whole merged
  /// statement (as it would have failed the transaction anyway).
  /// A wrong parameter count for a statement already used on this connection throws
  /// Error(InvalidArgument) here, before anything is queued.
  template <class... Args>
  void execute_deferred(std::string_view sql, const Args&... args) {
    const std::array<Param, sizeof...(Args)> params{Param(args)...};
    execute_deferred_params(sql, params);
  }
  virtual void execute_deferred_params(std::string_view sql, std::span<const Param> params) = 0;

  /// Runs every deferred statement still queued and throws the first error among them.
  /// Also throws when the transaction cannot commit because a statement of it failed
  /// earlier (PostgreSQL aborts the transaction then; SQLite does not, so there it only
  /// throws when SQLite rolled the transaction back). Cheap when nothing is queued.
  virtual void sync() = 0;

  /// Marks `event_id` processed for `consumer_group` with INSERT ... ON CONFLICT DO NOTHING.
  /// Returns true when this is the first time (the row was inserted by this call).
  /// The mark is part of this transaction: it disappears if the transaction rolls back.
  [[nodiscard]] virtual bool mark_processed(const Uuid& event_id,
                                            std::string_view consumer_group) = 0;

  /// The batch form: one statement for the whole span. Element i of the result is true
  /// when event_ids[i] was not processed before and does not occur earlier in the span;
  /// so an id repeated inside the batch is new at most at its first position.
  [[nodiscard]] virtual std::vector<bool> mark_processed_batch(std::span<const Uuid> event_ids,
                                                               std::string_view consumer_group) = 0;

  /// Removes the dedup mark of `event_id` for `consumer_group`, so that an event
  /// dead-lettered (or to be retried) is processed, not skipped as a duplicate, when it
  /// comes back. Part of this transaction: rolls back with it. The statement is the same
  /// on every backend (a Uuid binds as each backend stores it).
  virtual void unmark_processed(const Uuid& event_id, std::string_view consumer_group);

  /// A read-only look at the dedup rows: element i of the result is true when
  /// event_ids[i] is already marked for `consumer_group` (committed, or marked earlier in
  /// this transaction). Allowed in a begin_read() transaction. Only an optimisation (the
  /// consumer uses it to skip the external call of a redelivered event): it decides
  /// nothing, because a mark may land right after it; mark_processed stays the arbiter.
  /// The default runs one SELECT per id; the backends answer with one statement.
  [[nodiscard]] virtual std::vector<bool> processed_among(std::span<const Uuid> event_ids,
                                                          std::string_view consumer_group);

  /// Makes everything durable. After commit() the transaction is finished.
  /// Throws Error(InDoubt) when the connection broke during COMMIT: the outcome is
  /// then unknown and must not be guessed; redelivery plus the dedup mark decide.
  virtual void commit() = 0;
  /// Discards everything. Idempotent; never throws.
  virtual void rollback() noexcept = 0;
  /// True until commit() or rollback().
  [[nodiscard]] virtual bool active() const noexcept = 0;

 protected:
  friend class Savepoint;
  virtual void savepoint(std::string_view name) = 0;
  virtual void release_savepoint(std::string_view name) = 0;
  virtual void rollback_to_savepoint(std::string_view name) = 0;
};

/// A savepoint inside a transaction, so one failing piece of work can be undone
/// without losing the rest (used to isolate one event inside a batch). Rolls back
/// to the savepoint on destruction unless release()d. Savepoints nest.
class Savepoint {
 public:
  explicit Savepoint(Transaction& tx);
  Savepoint(const Savepoint&) = delete;
  Savepoint& operator=(const Savepoint&) = delete;
  ~Savepoint();

  /// Keeps the work done since the savepoint.
  void release();
  /// Undoes the work done since the savepoint; the transaction stays usable.
  void rollback();

 private:
  Transaction& tx_;
  std::string name_;
  bool done_ = false;
};

enum class Backend { Postgres, Sqlite };
[[nodiscard]] std::string_view to_string(Backend backend) noexcept;

/// How the schema is created.
struct MigrateOptions {
  /// PostgreSQL only: create processed_event RANGE-partitioned on event_id
  /// (UUIDv7 bounds at period boundaries) instead of as a plain table.
  bool partitioned = false;
  std::chrono::hours partition_period = std::chrono::hours(24);
  int partitions_behind = 7;  ///< periods before now that get a partition
  int partitions_ahead = 3;   ///< periods after now that get a partition
  const Clock* clock = &SystemClock::instance();
};

/// One versioned schema change of one backend: `sql/<backend>/NNNN_name.sql`.
struct SchemaMigration {
  int version = 0;        ///< 1, 2, ...: applied in this order, each once
  std::string_view name;  ///< e.g. "0001_orders_and_ledger"; recorded with the version
  std::string_view sql;   ///< one or more statements; no BEGIN/COMMIT of their own
};

/// An application's own schema, versioned apart from idem's: the reference system's
/// tables, or a user's business tables. Each set's versions are recorded under its
/// `name` in idem_schema_migrations, so sets never collide and idem's own migrations
/// (set kIdemMigrations) create only idem's tables.
struct MigrationSet {
  std::string name;                       ///< not kIdemMigrations; e.g. "reference"
  std::vector<SchemaMigration> postgres;  ///< in version order
  std::vector<SchemaMigration> sqlite;    ///< in version order
};

/// The name under which idem's own migrations (processed_event, idem_outbox, leases) are
/// recorded.
inline constexpr std::string_view kIdemMigrations = "idem";

/// What migrate() did.
struct MigrationReport {
  int from_version = 0;
  int to_version = 0;
  std::vector<std::string> applied;  ///< names of the migrations applied in this run
};

/// Options for opening a store.
struct StoreOptions {
  std::chrono::milliseconds busy_timeout{5000};    ///< SQLite: wait this long for a lock
  std::chrono::seconds connect_timeout{10};        ///< PostgreSQL: connect deadline
  std::chrono::milliseconds statement_timeout{0};  ///< PostgreSQL: 0 = server default
  std::string application_name = "idem";           ///< PostgreSQL: shown in pg_stat_activity
};

/// A connection to a dedup store. A Store is one connection: it is not
/// thread-safe, and at most one transaction is open on it at a time
/// (begin() throws Error(InvalidArgument) otherwise). Open one Store per thread.
class Store {
 public:
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  virtual ~Store() = default;

  /// Starts a transaction. The Store must outlive it. Throws Error on connection failure
  /// (a broken connection is re-established here, once, before giving up).
  [[nodiscard]] virtual std::unique_ptr<Transaction> begin() = 0;

  /// Starts a transaction that only reads. On SQLite it takes no write lock (a plain
  /// BEGIN: in WAL mode it reads a snapshot and never waits for a writer, where begin()
  /// queues behind every write transaction of other connections), and a statement that
  /// would write throws Error(InvalidArgument). On PostgreSQL it is begin(): readers never
  /// wait for writers there anyway.
  [[nodiscard]] virtual std::unique_ptr<Transaction> begin_read() { return begin(); }

  /// Applies every migration of idem's own schema not yet applied, in version order,
  /// each in its own transaction; safe to run again and from several processes at once.
  /// Creates only idem's tables (processed_event, idem_outbox, leases).
  virtual MigrationReport migrate(const MigrateOptions& options = {}) = 0;
  /// Applies an application's MigrationSet the same way (the backend's list of it).
  /// \throws Error(InvalidArgument) for an empty name or kIdemMigrations;
  ///   Error(Schema) when a migration fails (nothing of it stays).
  virtual MigrationReport migrate_set(const MigrationSet& set) = 0;
  /// The highest applied version of a migration set (0 when none is applied).
  [[nodiscard]] virtual int schema_version(std::string_view set = kIdemMigrations) = 0;

  [[nodiscard]] virtual Backend backend() const noexcept = 0;

  /// How many times this Store has replaced its connection since it was opened: a
  /// broken connection re-established by begin(), also on another host after a
  /// failover (a URL naming several hosts). A failed attempt counts too: the old
  /// session is gone either way. State a caller derived from the database
  /// (a position read from it, locks its session held) may not hold on the server it
  /// talks to now: comparing the count before and after a call tells. Never decreases.
  /// SQLite: always 0.
  [[nodiscard]] virtual std::uint64_t reconnects() const noexcept { return 0; }

  /// Opens another connection to the same database, with the same options (a consumer
  /// with `pipeline_depth` 2 prepares its next batch on it while this one commits).
  /// \throws Error(InvalidArgument) for a private in-memory SQLite database (no second
  ///   connection can reach it); Error(Connection) as open_store() does.
  [[nodiscard]] virtual std::unique_ptr<Store> connect_again() const = 0;
};

/// Opens a store by URL:
///   `postgresql://user:pass@host:port/db?sslmode=...` (or `postgres://`, or a libpq
///   key=value string prefixed with `postgresql:`), handed to libpq unchanged;
///   `sqlite:///absolute/path.db`, `sqlite://relative/path.db`, `sqlite://:memory:`.
/// Throws Error(InvalidArgument) for an unknown scheme, Error(Connection) if it cannot connect.
[[nodiscard]] std::unique_ptr<Store> open_store(std::string_view url,
                                                const StoreOptions& options = {});

/// Throws Error(Schema, `message`) when `store`'s schema has no table `table` (a store
/// migrated by an older idem, or by a program that did not apply a migration set the
/// caller needs). Runs inside `tx`.
void require_table(Store& store, Transaction& tx, std::string_view table, const char* message);

}  // namespace idem
