// Result and parameter helpers of the PostgreSQL store (pg_store.hpp).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "stores/postgres/pg_store.hpp"

namespace idem::detail::pg {

std::int64_t affected_rows(const PGresult* r) {
  // PQcmdTuples also counts the rows a SELECT returned; Rows::affected() means
  // rows changed, so read-only statements report 0 (as on SQLite).
  if (std::strncmp(PQcmdStatus(const_cast<PGresult*>(r)), "SELECT", 6) == 0) return 0;
  const char* n = PQcmdTuples(const_cast<PGresult*>(r));
  std::int64_t v = 0;
  std::from_chars(n, n + std::strlen(n), v);
  return v;
}

namespace {

// The built-in types' OIDs (PostgreSQL's pg_type.dat; fixed across releases). A domain or
// an array reports its own OID, so it reads as text.
ValueType value_type_of(Oid type) noexcept {
  switch (type) {
    case 16: return ValueType::Boolean;  // bool
    case 20:
    case 21:
    case 23:
    case 26: return ValueType::Integer;    // int8 int2 int4 oid
    case 1700: return ValueType::Decimal;  // numeric
    case 700:
    case 701: return ValueType::Real;        // float4 float8
    case 2950: return ValueType::UuidValue;  // uuid
    case 1114:
    case 1184: return ValueType::TimestampValue;  // timestamp(tz)
    case 114:
    case 3802: return ValueType::Json;  // json jsonb
    case 17: return ValueType::Bytes;   // bytea
    default: return ValueType::Text;
  }
}

}  // namespace

Rows to_rows(const PGresult* r) {
  const int nrows = PQntuples(r);
  const int ncols = PQnfields(r);
  std::vector<Column> columns;
  columns.reserve(static_cast<std::size_t>(ncols));
  for (int j = 0; j < ncols; ++j) {
    const char* name = PQfname(r, j);
    columns.push_back(Column{name != nullptr ? name : "", value_type_of(PQftype(r, j))});
  }
  std::vector<std::optional<std::string>> cells;
  cells.reserve(static_cast<std::size_t>(nrows) * static_cast<std::size_t>(ncols));
  for (int i = 0; i < nrows; ++i) {
    for (int j = 0; j < ncols; ++j) {
      if (PQgetisnull(r, i, j)) {
        cells.emplace_back(std::nullopt);
      } else {
        cells.emplace_back(std::in_place, PQgetvalue(r, i, j),
                           static_cast<std::size_t>(PQgetlength(r, i, j)));
      }
    }
  }
  return Rows(std::move(columns), std::move(cells), affected_rows(r));
}

void validate_savepoint_name(std::string_view name) {
  const bool valid = !name.empty() && name.size() <= 63 &&
                     !(name.front() >= '0' && name.front() <= '9') &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
                     });
  if (!valid) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                fmt::format("invalid savepoint name '{}': use [a-z0-9_], not starting with a "
                            "digit, at most 63 characters",
                            name));
  }
}

void put_be32(std::string& out, std::uint32_t v) {
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                         static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(bytes, 4);
}

void append_text(std::string& out, const Param::Value& v) {
  char buf[64];
  if (const auto* i = std::get_if<std::int64_t>(&v)) {
    const auto res = std::to_chars(buf, buf + sizeof buf, *i);
    out.append(buf, res.ptr);
  } else if (const auto* d = std::get_if<double>(&v)) {
    // float8in reads these spellings; to_chars would write "inf"/"nan".
    if (std::isnan(*d)) {
      out += "NaN";
    } else if (std::isinf(*d)) {
      out += *d > 0 ? "Infinity" : "-Infinity";
    } else {
      const auto res = std::to_chars(buf, buf + sizeof buf, *d);  // shortest round trip
      out.append(buf, res.ptr);
    }
  } else if (const auto* b = std::get_if<bool>(&v)) {
    out += *b ? "true" : "false";
  } else if (const auto* u = std::get_if<Uuid>(&v)) {
    u->format_to(buf);
    out.append(buf, 36);
  } else if (const auto* s = std::get_if<std::string>(&v)) {
    out += *s;
  }
}

Params TextParams::encode(std::span<const Param> params) {
  arena_.clear();
  offsets_.clear();
  values_.clear();
  for (const Param& p : params) {
    offsets_.push_back(arena_.size());
    const auto& v = p.value();
    if (v.index() != 0 && !std::holds_alternative<std::string>(v)) {
      append_text(arena_, v);
      arena_.push_back('\0');
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& v = params[i].value();
    if (v.index() == 0) {
      values_.push_back(nullptr);
    } else if (const auto* s = std::get_if<std::string>(&v)) {
      values_.push_back(s->c_str());
    } else {
      values_.push_back(arena_.data() + offsets_[i]);  // the arena no longer moves
    }
  }
  Params out;
  out.count = static_cast<int>(values_.size());
  out.values = values_.data();
  return out;  // lengths and formats may stay null for text parameters
}
}  // namespace idem::detail::pg
