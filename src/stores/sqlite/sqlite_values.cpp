// Values in and out of SQLite statements (sqlite_values.hpp).
#include "stores/sqlite/sqlite_values.hpp"

#include <algorithm>
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
