#pragma once
/// \file
/// SQLite backend, the embedded default. Factory and escape hatch only.

#include <memory>
#include <string_view>

#include "idem/store.hpp"

struct sqlite3;

namespace idem {

/// Opens (creating if needed) the database file at `path` (":memory:" for a private
/// in-memory database) in WAL mode with the configured busy timeout. Throws Error(Connection).
[[nodiscard]] std::unique_ptr<Store> make_sqlite_store(std::string_view path,
                                                       const StoreOptions& options = {});

/// The native handle. Do not change transaction state through it while an idem
/// Transaction is open. Throws Error(InvalidArgument) if `store` is not SQLite.
[[nodiscard]] sqlite3* sqlite_native_handle(Store& store);

}  // namespace idem
