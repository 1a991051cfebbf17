#pragma once
/// \file
/// PostgreSQL backend (libpq). Factory and escape hatch only; the class is private.

#include <memory>
#include <string_view>

#include "idem/store.hpp"

struct pg_conn;  // libpq's PGconn, declared here so that this header needs no libpq header

namespace idem {

/// Connects with a libpq connection string or URI. Throws Error(Connection).
[[nodiscard]] std::unique_ptr<Store> make_postgres_store(std::string_view conninfo,
                                                         const StoreOptions& options = {});

/// The native connection, for users who need libpq directly. Do not change
/// transaction state through it while an idem Transaction is open.
/// Throws Error(InvalidArgument) if `store` is not a PostgreSQL store.
[[nodiscard]] pg_conn* postgres_native_handle(Store& store);

}  // namespace idem
