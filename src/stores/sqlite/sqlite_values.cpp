// Values in and out of SQLite statements (sqlite_values.hpp).
#include "stores/sqlite/sqlite_values.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <variant>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "stores/sqlite/sqlite_error.hpp"

namespace idem::detail::sqlite {
namespace {

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

int bind_one(sqlite3_stmt* s, int index, const Param& p) {
  // SQLITE_STATIC: the values live in the caller's span for the whole execute call, and
  // the statement's bindings are cleared before execute returns.
  return std::visit(
      Overloaded{
          [&](std::monostate) { return sqlite3_bind_null(s, index); },
          [&](std::int64_t v) { return sqlite3_bind_int64(s, index, v); },
          [&](double v) { return sqlite3_bind_double(s, index, v); },
          [&](bool v) { return sqlite3_bind_int(s, index, v ? 1 : 0); },
          [&](const std::string& v) {
            return sqlite3_bind_text64(s, index, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8);
          },
          [&](const Uuid& v) {
            return sqlite3_bind_blob(s, index, v.bytes().data(), static_cast<int>(v.bytes().size()),
                                     SQLITE_STATIC);
          },
      },
      p.value());
}

}  // namespace

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, ErrorSource::Sqlite, message);
}

void validate_group(std::string_view group) {
  if (group.empty()) invalid("sqlite: consumer_group must not be empty");
}

// Savepoint names come from idem::Savepoint ("idem_sp_<n>"). They are spliced into SQL
// (SAVEPOINT takes no parameters), so only a strict alphabet is accepted, and the name
// is quoted as an identifier on top of that.
void validate_savepoint_name(std::string_view name) {
  const bool ok =
      !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      });
  if (!ok) invalid(fmt::format("sqlite: invalid savepoint name '{}'", name.substr(0, 64)));
}

namespace {

// SQLite's own rule for a declared type's affinity also reads substrings ("INT" anywhere
// means INTEGER affinity), so a name such as "BOOLEAN NOT NULL" or "uuid_text" counts.
bool declares(std::string_view declared, std::string_view word) {
  return std::search(declared.begin(), declared.end(), word.begin(), word.end(),
                     [](char a, char b) {
                       return std::toupper(static_cast<unsigned char>(a)) == b;
                     }) != declared.end();
}

ValueType declared_type(const char* declared) {
  if (declared == nullptr) return ValueType::Text;
  const std::string_view d(declared);
  if (declares(d, "BOOL")) return ValueType::Boolean;
  if (declares(d, "UUID")) return ValueType::UuidValue;
  if (declares(d, "TIMESTAMP") || declares(d, "DATETIME")) return ValueType::TimestampValue;
  if (declares(d, "JSON")) return ValueType::Json;
  return ValueType::Text;
}

}  // namespace

std::vector<Column> describe_columns(sqlite3_stmt* s) {
  const int n = sqlite3_column_count(s);
  std::vector<Column> columns;
  columns.reserve(static_cast<std::size_t>(n));
  for (int c = 0; c < n; ++c) {
    const char* name = sqlite3_column_name(s, c);
    columns.push_back(
        Column{name != nullptr ? name : "", declared_type(sqlite3_column_decltype(s, c))});
  }
  return columns;
}

ValueType value_type(sqlite3_stmt* s, int col, ValueType declared) noexcept {
  switch (sqlite3_column_type(s, col)) {
    case SQLITE_NULL: return ValueType::Null;
    case SQLITE_INTEGER:
      return declared == ValueType::Boolean ? ValueType::Boolean : ValueType::Integer;
    case SQLITE_FLOAT: return ValueType::Real;
    case SQLITE_BLOB:
      return declared == ValueType::UuidValue && sqlite3_column_bytes(s, col) == 16
                 ? ValueType::UuidValue
                 : ValueType::Bytes;
    default:
      return declared == ValueType::UuidValue || declared == ValueType::TimestampValue ||
                     declared == ValueType::Json
                 ? declared
                 : ValueType::Text;
  }
}

std::optional<std::string> column_value(sqlite3_stmt* s, int col) {
  switch (sqlite3_column_type(s, col)) {
    case SQLITE_NULL: return std::nullopt;
    case SQLITE_INTEGER: {
      char buf[24];
      const auto r = std::to_chars(buf, buf + sizeof buf, sqlite3_column_int64(s, col));
      return std::string(buf, r.ptr);
    }
    case SQLITE_FLOAT: {
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, sqlite3_column_double(s, col));
      return std::string(buf, r.ptr);
    }
    case SQLITE_BLOB: {
      const void* p = sqlite3_column_blob(s, col);
      const int n = sqlite3_column_bytes(s, col);
      if (p == nullptr || n <= 0) return std::string();
      return std::string(static_cast<const char*>(p), static_cast<std::size_t>(n));
    }
    default: {
      const unsigned char* p = sqlite3_column_text(s, col);
      const int n = sqlite3_column_bytes(s, col);
      if (p == nullptr || n <= 0) return std::string();
      return std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n));
    }
  }
}

std::uint64_t load_be64(const unsigned char* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

void bind_all(sqlite3* db, Statement& st, std::span<const Param> params, std::string_view sql) {
  const auto& binding = st.binding();
  const auto given = params.size();
  const auto needed = static_cast<std::size_t>(st.arity());
  if (given < needed) {
    std::size_t missing = needed - 1;
    for (const int b : binding) {
      const auto idx = static_cast<std::size_t>(b);
      if (idx >= given && idx < missing) missing = idx;
    }
    invalid(
        fmt::format("sqlite: placeholder ${} has no value: the statement uses {} parameter(s), {} "
                    "given [SQL: {}]",
                    missing + 1, needed, given, sql_excerpt(sql)));
  }
  if (given > needed) {
    invalid(fmt::format("sqlite: the statement uses {} parameter(s), but {} were given [SQL: {}]",
                        needed, given, sql_excerpt(sql)));
  }
  sqlite3_stmt* s = st.get();
  for (std::size_t i = 0; i < binding.size(); ++i) {
    const auto idx = static_cast<std::size_t>(binding[i]);
    const int rc = bind_one(s, static_cast<int>(i + 1), params[idx]);
    if (rc != SQLITE_OK)
      throw make_error(db, rc, fmt::format("cannot bind parameter ${}", idx + 1), sql);
  }
}

}  // namespace idem::detail::sqlite
