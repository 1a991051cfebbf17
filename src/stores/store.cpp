// Backend-independent parts of the store API: parameters, result rows,
// savepoints and URL dispatch.
#include "idem/store.hpp"

#include <atomic>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/stores/postgres.hpp"
#include "idem/stores/sqlite.hpp"
#include "stores/migration.hpp"

namespace idem {

namespace {

[[noreturn]] void throw_cell_error(const std::string& what) {
  throw Error(ErrorCode::Query, ErrorSource::Internal, what);
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

Param::Param(Timestamp v) : value_(format_rfc3339(v)) {}

void Transaction::unmark_processed(const Uuid& event_id, std::string_view consumer_group) {
  execute("DELETE FROM processed_event WHERE event_id = $1 AND consumer_group = $2", event_id,
          consumer_group);
}

std::vector<bool> Transaction::processed_among(std::span<const Uuid> event_ids,
                                               std::string_view consumer_group) {
  std::vector<bool> out(event_ids.size(), false);
  for (std::size_t i = 0; i < event_ids.size(); ++i) {
    out[i] = !execute("SELECT 1 FROM processed_event WHERE event_id = $1 AND consumer_group = $2",
                      event_ids[i], consumer_group)
                  .empty();
  }
  return out;
}

const std::optional<std::string>& Rows::cell(std::size_t row, std::size_t col) const {
  if (col >= columns_ || row >= size()) {
    throw_cell_error(fmt::format("cell ({}, {}) is outside a result of {} rows x {} columns", row,
                                 col, size(), columns_));
  }
  return cells_[row * columns_ + col];
}

std::optional<std::size_t> Rows::column_index(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < column_info_.size(); ++i) {
    if (column_info_[i].name == name) return i;
  }
  return std::nullopt;
}

ValueType Rows::type(std::size_t row, std::size_t col) const {
  if (!cell(row, col)) return ValueType::Null;
  if (!value_types_.empty()) return value_types_[row * columns_ + col];
  return column_info_[col].type;
}

ValueType RowView::type(std::size_t col) const {
  return rows_->type(row_, col);
}

std::size_t RowView::size() const noexcept {
  return rows_->columns();
}

bool RowView::is_null(std::size_t col) const {
  return !rows_->cell(row_, col).has_value();
}

std::string_view RowView::text(std::size_t col) const {
  const auto& c = rows_->cell(row_, col);
  if (!c) throw_cell_error(fmt::format("column {} is NULL", col));
  return *c;
}

std::int64_t RowView::int64(std::size_t col) const {
  const std::string_view t = text(col);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || end != t.data() + t.size()) {
    throw_cell_error(fmt::format("column {} is not an integer: '{}'", col, t));
  }
  return v;
}

double RowView::real(std::size_t col) const {
  const std::string t(text(col));
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (t.empty() || end != t.c_str() + t.size()) {
    throw_cell_error(fmt::format("column {} is not a number: '{}'", col, t));
  }
  return v;
}

Uuid RowView::uuid(std::size_t col) const {
  const std::string_view t = text(col);
  if (t.size() == 16) {  // SQLite stores UUIDs as 16-byte BLOBs
    Uuid::Bytes b{};
    std::memcpy(b.data(), t.data(), 16);
    return Uuid(b);
  }
  if (auto u = Uuid::parse(t)) return *u;
  throw_cell_error(fmt::format("column {} is not a UUID", col));
}

Amount RowView::amount(std::size_t col) const {
  const std::string_view t = text(col);
  if (auto a = Amount::parse(t)) return *a;
  throw_cell_error(fmt::format("column {} is not an exact amount: '{}'", col, t));
}

bool RowView::boolean(std::size_t col) const {
  const std::string_view t = text(col);
  if (t == "t" || t == "true" || t == "1") return true;
  if (t == "f" || t == "false" || t == "0") return false;
  throw_cell_error(fmt::format("column {} is not a boolean: '{}'", col, t));
}

namespace {
// Savepoint names only need to be unique among the savepoints open on one
// connection; a process-wide counter is the simplest way to get that.
std::atomic<std::uint64_t> savepoint_counter{0};
}  // namespace

Savepoint::Savepoint(Transaction& tx)
    : tx_(tx), name_(fmt::format("idem_sp_{}", savepoint_counter.fetch_add(1) + 1)) {
  tx_.savepoint(name_);
}

Savepoint::~Savepoint() {
  if (done_ || !tx_.active()) return;
  try {
    tx_.rollback_to_savepoint(name_);
  } catch (...) {
    // A destructor must not throw; a failed rollback-to leaves the transaction
    // in an error state and its own commit() will report that.
  }
}

void Savepoint::release() {
  if (done_) return;
  done_ = true;
  tx_.release_savepoint(name_);
}

void Savepoint::rollback() {
  if (done_) return;
  done_ = true;
  tx_.rollback_to_savepoint(name_);
  tx_.release_savepoint(name_);
}

std::string_view to_string(ValueType type) noexcept {
  switch (type) {
    case ValueType::Null: return "null";
    case ValueType::Integer: return "integer";
    case ValueType::Decimal: return "decimal";
    case ValueType::Real: return "real";
    case ValueType::Boolean: return "boolean";
    case ValueType::UuidValue: return "uuid";
    case ValueType::TimestampValue: return "timestamp";
    case ValueType::Json: return "json";
    case ValueType::Bytes: return "bytes";
    case ValueType::Text: return "text";
  }
  return "unknown";
}

std::string_view to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::Postgres: return "postgres";
    case Backend::Sqlite: return "sqlite";
  }
  return "unknown";
}

std::unique_ptr<Store> open_store(std::string_view url, const StoreOptions& options) {
  if (starts_with(url, "postgresql://") || starts_with(url, "postgres://")) {
    return make_postgres_store(url, options);
  }
  if (starts_with(url, "postgresql:")) {  // "postgresql:host=... dbname=..." key/value form
    return make_postgres_store(url.substr(std::strlen("postgresql:")), options);
  }
  if (starts_with(url, "sqlite://")) {
    const std::string_view path = url.substr(std::strlen("sqlite://"));
    if (path.empty()) {
      throw Error(
          ErrorCode::InvalidArgument, ErrorSource::Config,
          "store URL 'sqlite://' names no file (use sqlite:///abs/path.db or sqlite://:memory:)");
    }
    return make_sqlite_store(path, options);
  }
  throw Error(
      ErrorCode::InvalidArgument, ErrorSource::Config,
      fmt::format("store URL has an unknown scheme (expected postgresql:// or sqlite://): '{}'",
                  url.substr(0, url.find(':'))));
}

}  // namespace idem

namespace idem::detail {

void check_migration_set_name(std::string_view name, std::string_view backend) {
  if (name.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Internal,
                fmt::format("{}: migrate_set: a MigrationSet needs a name", backend));
  }
  if (name == kIdemMigrations) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Internal,
                fmt::format("{}: migrate_set: '{}' is idem's own migration set; use migrate()",
                            backend, name));
  }
}

}  // namespace idem::detail
