#pragma once
// idem's own versioned schema, embedded from sql/<backend>/NNNN_name.sql at build time.
#include <string_view>
#include <vector>

#include "idem/store.hpp"

namespace idem::detail {

namespace postgres_sql {
const std::vector<SchemaMigration>& migrations();
/// sql/postgres/0006_idem_outbox.sql (see kOutboxTable).
inline constexpr int kOutboxRenameVersion = 6;
}  // namespace postgres_sql
namespace sqlite_sql {
const std::vector<SchemaMigration>& migrations();
/// sql/sqlite/0007_idem_outbox.sql (see kOutboxTable).
inline constexpr int kOutboxRenameVersion = 7;
}  // namespace sqlite_sql

/// The outbox table. Migration 2 creates it under this name; an older idem created it as
/// `outbox`, and idem's migration kOutboxRenameVersion renames that one and leaves the
/// compatibility view `outbox`. On a store that already has kOutboxTable (created by this
/// idem) there is nothing to rename: the store records that migration without running
/// it, after looking inside the migration's transaction, so such a store never gets an
/// `outbox` of idem's (an application's own `outbox` is left alone).
inline constexpr const char* kOutboxTable = "idem_outbox";

/// Refuses a MigrationSet that may not be applied (empty name, idem's own name).
void check_migration_set_name(std::string_view name, std::string_view backend);

}  // namespace idem::detail
