// The SQLite store's transaction: statements, the dedup marks (one row, or multi-row
// chunks) and lazy savepoints.
#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "stores/sqlite/sqlite_error.hpp"
#include "stores/sqlite/sqlite_store.hpp"
#include "stores/sqlite/sqlite_values.hpp"

namespace idem::detail::sqlite {

// ---------------------------------------------------------------------------------------
// SqliteTransaction

SqliteTransaction::~SqliteTransaction() {
  rollback();
}

void SqliteTransaction::finish(State state) noexcept {
  state_ = state;
  savepoints_.clear();
  if (store_ != nullptr) store_->transaction_finished(this);
}

void SqliteTransaction::check_still_open() noexcept {
  if (state_ == State::Active && store_ != nullptr && sqlite3_get_autocommit(store_->db()) != 0) {
    finish(State::Aborted);
  }
}

SqliteStore& SqliteTransaction::usable() {
  switch (state_) {
    case State::Active: break;
    case State::Committed:
    case State::RolledBack:
      invalid("sqlite: the transaction is already finished (committed or rolled back)");
    case State::Aborted:
      throw Error(ErrorCode::TransactionAborted, ErrorSource::Sqlite,
                  "sqlite: the transaction was rolled back after an earlier error; redo the whole "
                  "unit of work in a new transaction");
    case State::Detached: invalid("sqlite: the Store of this transaction was destroyed");
  }
  if (sqlite3_get_autocommit(store_->db()) != 0) {
    finish(State::Aborted);
    throw Error(ErrorCode::TransactionAborted, ErrorSource::Sqlite,
                "sqlite: SQLite rolled the transaction back after an earlier error; redo the "
                "whole unit of work in a new transaction");
  }
  return *store_;
}

Rows SqliteTransaction::execute_params(std::string_view sql, std::span<const Param> params) {
  SqliteStore& store = usable();
  materialize_savepoints();
  sqlite3* db = store.db();
  Statement& st = store.user_statement(sql);
  StatementUse use(st);
  bind_all(db, st, params, sql);

  sqlite3_stmt* s = st.get();
  if (sqlite3_stmt_readonly(s) == 0) require_writable(sql);
  std::vector<Column> columns = describe_columns(s);
  std::vector<std::optional<std::string>> cells;
  std::vector<ValueType> value_types;
  const sqlite3_int64 changes_before = sqlite3_total_changes64(db);
  for (;;) {
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      for (std::size_t c = 0; c < columns.size(); ++c) {
        const int col = static_cast<int>(c);
        value_types.push_back(value_type(s, col, columns[c].type));
        cells.push_back(column_value(s, col));
      }
      continue;
    }
    if (rc == SQLITE_DONE) break;
    const Error e = make_error(db, rc, "statement failed", sql);
    st.reset();
    check_still_open();
    throw e;
  }
  // sqlite3_changes() keeps the count of the last INSERT/UPDATE/DELETE, so it is only
  // read when this statement changed something (a SELECT or DDL reports 0).
  std::int64_t affected = 0;
  if (sqlite3_stmt_readonly(s) == 0 && sqlite3_total_changes64(db) != changes_before) {
    affected = sqlite3_changes64(db);
  }
  return Rows(std::move(columns), std::move(cells), affected, std::move(value_types));
}

void SqliteTransaction::execute_deferred_params(std::string_view sql,
                                                std::span<const Param> params) {
  // An INSERT/UPDATE returns no rows, so this builds nothing; a statement that does
  // return rows has them dropped.
  (void)execute_params(sql, params);
}

void SqliteTransaction::require_writable(std::string_view what) const {
  if (!read_only_) return;
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite,
              fmt::format("sqlite: a read transaction (begin_read) cannot write: {}", what));
}

bool SqliteTransaction::mark_processed(const Uuid& event_id, std::string_view consumer_group) {
  require_writable("mark_processed");
  validate_group(consumer_group);
  SqliteStore& store = usable();
  materialize_savepoints();
  sqlite3* db = store.db();
  Statement& st = store.mark_statement();
  StatementUse use(st);
  sqlite3_stmt* s = st.get();
  int rc = sqlite3_bind_blob(s, 1, event_id.bytes().data(),
                             static_cast<int>(event_id.bytes().size()), SQLITE_STATIC);
  if (rc == SQLITE_OK) {
    rc = sqlite3_bind_text64(s, 2, consumer_group.data(), consumer_group.size(), SQLITE_STATIC,
                             SQLITE_UTF8);
  }
  if (rc != SQLITE_OK) throw make_error(db, rc, "cannot bind dedup mark", kMarkSql);
  // INSERT ... ON CONFLICT DO NOTHING: the primary key decides atomically whether this
  // is the first time (one row inserted) or not (none). Never SELECT-then-INSERT.
  rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) {
    const Error e = make_error(db, rc, "cannot mark event processed", kMarkSql);
    st.reset();
    check_still_open();
    throw e;
  }
  return sqlite3_changes64(db) == 1;
}

std::vector<bool> SqliteTransaction::processed_among(std::span<const Uuid> event_ids,
                                                     std::string_view consumer_group) {
  validate_group(consumer_group);
  std::vector<bool> out(event_ids.size(), false);
  for (std::size_t i = 0; i < event_ids.size(); ++i) {
    const std::array<Param, 2> params{Param(event_ids[i]), Param(consumer_group)};
    out[i] =
        !execute_params("SELECT 1 FROM processed_event WHERE event_id = $1 AND consumer_group = $2",
                        params)
             .empty();
  }
  return out;
}

std::vector<bool> SqliteTransaction::mark_processed_batch(std::span<const Uuid> event_ids,
                                                          std::string_view consumer_group) {
  require_writable("mark_processed_batch");
  validate_group(consumer_group);
  SqliteStore& store = usable();
  std::vector<bool> result(event_ids.size(), false);
  if (event_ids.empty()) return result;
  materialize_savepoints();

  // Distinct ids with the position of their first occurrence, sorted by id. Sorting
  // (rather than hashing) needs one allocation, lets RETURNING rows be mapped back to
  // positions by a forward scan, and inserts in key order, which is kind to the B-tree.
  // Ids are compared as two big-endian 64-bit halves (the same order as bytewise).
  struct Item {
    std::uint64_t hi;
    std::uint64_t lo;
    std::size_t pos;
  };
  const auto key_less = [](const Item& a, const Item& b) {
    return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
  };
  std::vector<Item> items;
  items.reserve(event_ids.size());
  for (std::size_t i = 0; i < event_ids.size(); ++i) {
    const auto* b = event_ids[i].bytes().data();
    items.push_back({load_be64(b), load_be64(b + 8), i});
  }
  // UUIDv7s from one producer mostly arrive in order already; then there is nothing to sort.
  const auto by_key_then_pos = [&](const Item& a, const Item& b) {
    return key_less(a, b) || (!key_less(b, a) && a.pos < b.pos);
  };
  if (!std::is_sorted(items.begin(), items.end(), by_key_then_pos)) {
    std::sort(items.begin(), items.end(), by_key_then_pos);
  }
  items.erase(
      std::unique(items.begin(), items.end(),
                  [](const Item& a, const Item& b) { return a.hi == b.hi && a.lo == b.lo; }),
      items.end());

  sqlite3* db = store.db();
  const std::size_t chunk = store.max_batch_rows();
  for (std::size_t offset = 0; offset < items.size(); offset += chunk) {
    const std::size_t rows = std::min(chunk, items.size() - offset);
    const auto first = items.begin() + static_cast<std::ptrdiff_t>(offset);
    const auto last = first + static_cast<std::ptrdiff_t>(rows);

    // The statement's row count is rounded up (to a power of two up to 32, then to a
    // multiple of 32, never past the chunk size) and the extra rows repeat the last id.
    // A repeated id inside one INSERT ... ON CONFLICT DO NOTHING conflicts with its own
    // first row, so it inserts nothing and RETURNING does not return it: the result is
    // the same. Why: the number of distinct ids in a batch varies with its duplicates,
    // and with exact sizes a batch of 1000 with 10% duplicates needed a new size almost
    // every batch, so the 16-entry cache thrashed and each batch re-prepared its marker
    // (1-2 ms for ~900 rows). Measured with idem_bench_consumer, 1M events, dedup-only
    // handler: batches of 100, 36k events/s with exact sizes (raw loop 137k); see
    // bench/RESULTS.md for the figures after. Padding costs one failed index probe per row.
    std::size_t padded = 1;
    while (padded < rows && padded < 32) padded *= 2;
    if (rows > 32) padded = (rows + 31) / 32 * 32;
    padded = std::min(padded, chunk);
    Statement& st = store.batch_statement(padded);
    StatementUse use(st);
    sqlite3_stmt* s = st.get();
    int rc = sqlite3_bind_text64(s, 1, consumer_group.data(), consumer_group.size(), SQLITE_STATIC,
                                 SQLITE_UTF8);
    for (std::size_t r = 0; r < padded && rc == SQLITE_OK; ++r) {
      const std::size_t k = std::min(r, rows - 1);
      rc = sqlite3_bind_blob(s, static_cast<int>(r + 2),
                             event_ids[first[static_cast<std::ptrdiff_t>(k)].pos].bytes().data(),
                             16, SQLITE_STATIC);
    }
    if (rc != SQLITE_OK) throw make_error(db, rc, "cannot bind dedup batch");

    // One multi-row INSERT ... ON CONFLICT DO NOTHING RETURNING event_id: the rows it
    // returns are exactly the ids inserted now, i.e. the ones not processed before.
    // SQLite returns them in insertion order in practice (the documentation promises no
    // order), i.e. sorted, so a cursor that only moves forward finds each one; a binary
    // search covers any other order.
    auto cursor = first;
    for (;;) {
      rc = sqlite3_step(s);
      if (rc == SQLITE_ROW) {
        const auto* blob = static_cast<const unsigned char*>(sqlite3_column_blob(s, 0));
        if (blob == nullptr || sqlite3_column_bytes(s, 0) != 16) {
          throw Error(ErrorCode::Internal, ErrorSource::Sqlite,
                      "sqlite: dedup batch returned an event_id that is not 16 bytes");
        }
        const Item key{load_be64(blob), load_be64(blob + 8), 0};
        while (cursor != last && key_less(*cursor, key)) ++cursor;
        auto it = cursor;
        if (it == last || key_less(key, *it)) it = std::lower_bound(first, last, key, key_less);
        if (it == last || key_less(key, *it)) {
          throw Error(ErrorCode::Internal, ErrorSource::Sqlite,
                      "sqlite: dedup batch returned an event_id it was not given");
        }
        result[it->pos] = true;
        continue;
      }
      if (rc == SQLITE_DONE) break;
      const Error e = make_error(db, rc, "cannot mark event batch processed");
      st.reset();
      check_still_open();
      throw e;
    }
  }
  return result;
}

// Lazy savepoints. SAVEPOINT runs only when the next statement does (so a savepoint
// with no statement inside costs nothing: the consumer's dedup-only handlers), and a
// savepoint that never ran needs no RELEASE or ROLLBACK TO, because nothing ran after
// it. Every path that runs SQL on the connection (execute_params, the marks, the native
// handle) calls materialize_savepoints() first, so the connection's savepoint stack is
// exactly savepoints_ whenever a statement runs. The statements are prepared once per
// nesting depth instead of parsed per call (sqlite3_exec of "SAVEPOINT \"idem_sp_<n>\""
// and "RELEASE ..." cost about 2 x 2-3 us per event before).
std::size_t SqliteTransaction::find_savepoint(std::string_view name) const {
  for (std::size_t i = savepoints_.size(); i-- > 0;) {
    if (savepoints_[i].name == name) return i;
  }
  invalid(fmt::format("sqlite: no such savepoint: {}", name));
}

void SqliteTransaction::materialize_savepoints() {
  if (savepoints_.empty() || savepoints_.back().sent) return;
  SqliteStore& store = usable();
  for (std::size_t i = 0; i < savepoints_.size(); ++i) {
    if (savepoints_[i].sent) continue;
    std::optional<Error> error;
    if (store.run_control(store.savepoint_statement(i, SqliteStore::SavepointOp::Create),
                          "cannot create savepoint", error) != SQLITE_DONE) {
      check_still_open();
      throw *error;
    }
    savepoints_[i].sent = true;
  }
}

void SqliteTransaction::savepoint(std::string_view name) {
  validate_savepoint_name(name);
  (void)usable();
  savepoints_.push_back({std::string(name), false});
}

void SqliteTransaction::release_savepoint(std::string_view name) {
  validate_savepoint_name(name);
  SqliteStore& store = usable();
  const std::size_t i = find_savepoint(name);
  if (savepoints_[i].sent) {
    // RELEASE also releases every savepoint nested inside this one.
    std::optional<Error> error;
    if (store.run_control(store.savepoint_statement(i, SqliteStore::SavepointOp::Release),
                          "cannot release savepoint", error) != SQLITE_DONE) {
      check_still_open();
      throw *error;
    }
  }
  savepoints_.resize(i);
}

void SqliteTransaction::rollback_to_savepoint(std::string_view name) {
  validate_savepoint_name(name);
  SqliteStore& store = usable();
  const std::size_t i = find_savepoint(name);
  if (savepoints_[i].sent) {
    // The savepoint stays open; the ones nested inside it are gone.
    std::optional<Error> error;
    if (store.run_control(store.savepoint_statement(i, SqliteStore::SavepointOp::RollbackTo),
                          "cannot roll back to savepoint", error) != SQLITE_DONE) {
      check_still_open();
      throw *error;
    }
  }
  savepoints_.resize(i + 1);
}

void SqliteTransaction::commit() {
  SqliteStore& store = usable();
  std::optional<Error> error;
  const int rc = store.run_control(*store.commit_, "commit failed", error);
  if (rc == SQLITE_DONE) {
    finish(State::Committed);
    return;
  }
  // SQLite may leave the transaction open after a failed COMMIT (after SQLITE_BUSY it
  // expects the caller to retry the COMMIT). idem's callers redo the whole unit of work
  // instead, so roll back now and leave the connection ready for the next begin().
  if (sqlite3_get_autocommit(store.db()) == 0) {
    std::optional<Error> ignored;
    store.run_control(*store.rollback_, "rollback after failed commit", ignored);
  }
  finish(State::Aborted);
  // An I/O error during COMMIT leaves the outcome unknown: the WAL frame carrying the
  // commit record may be written although its fsync failed, and recovery would then keep
  // it. Never guess (InDoubt): redelivery plus the dedup mark decide.
  if ((rc & 0xff) == SQLITE_IOERR) {
    throw Error(ErrorCode::InDoubt, ErrorSource::Sqlite, error->what(), error->detail());
  }
  throw *error;
}

void SqliteTransaction::rollback() noexcept {
  if (state_ != State::Active) return;
  if (store_ != nullptr && sqlite3_get_autocommit(store_->db()) == 0) {
    try {
      std::optional<Error> ignored;
      store_->run_control(*store_->rollback_, "rollback failed", ignored);
    } catch (...) {
      // Only allocation can throw here. If ROLLBACK itself failed, SQLite has either
      // rolled back already or will when the connection closes; the next begin() reports
      // a connection still inside a transaction.
    }
  }
  finish(State::RolledBack);
}

void SqliteTransaction::detach() noexcept {
  rollback();
  state_ = State::Detached;
  store_ = nullptr;
}

}  // namespace idem::detail::sqlite
