#pragma once
// Values in and out of SQLite statements, and the checks on what idem splices into SQL;
// shared by the store (sqlite_store.cpp) and its transaction (sqlite_transaction.cpp).
#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idem/store.hpp"
#include "stores/sqlite/statement_cache.hpp"

namespace idem::detail::sqlite {

inline constexpr std::string_view kMarkSql =
    "INSERT INTO processed_event(event_id, consumer_group) VALUES (?1, ?2) "
    "ON CONFLICT DO NOTHING";

/// Throws Error(InvalidArgument) from the SQLite store.
[[noreturn]] void invalid(const std::string& message);
void validate_group(std::string_view group);
void validate_savepoint_name(std::string_view name);
/// One result cell as idem's text form: integers and reals exactly (shortest text that
/// reads back to the same value), text as UTF-8, BLOBs as their raw bytes.
[[nodiscard]] std::optional<std::string> column_value(sqlite3_stmt* s, int col);
/// The result columns of `s`: names, and the type that each column's declared type gives
/// its values (BOOLEAN, UUID, TIMESTAMP/DATETIME, JSON; ValueType::Text otherwise or for
/// an expression, which has no declared type).
[[nodiscard]] std::vector<Column> describe_columns(sqlite3_stmt* s);
/// The type of the value in column `col` of the current row: its storage class, refined by
/// `declared` (describe_columns) where the two agree (an INTEGER in a BOOLEAN column is a
/// Boolean, a 16-byte BLOB in a UUID column a Uuid).
[[nodiscard]] ValueType value_type(sqlite3_stmt* s, int col, ValueType declared) noexcept;
[[nodiscard]] std::uint64_t load_be64(const unsigned char* p) noexcept;
/// Binds `params` to the statement's placeholders; a missing or extra value is an error
/// that names the placeholder and the SQL.
void bind_all(sqlite3* db, Statement& st, std::span<const Param> params, std::string_view sql);

}  // namespace idem::detail::sqlite
