#pragma once
// The reference system's tables, embedded from sql/reference/<backend>/NNNN_name.sql, and
// the payment provider's, from sql/reference/<backend>/provider/NNNN_name.sql.
#include <vector>

#include "idem/store.hpp"

namespace idem::reference::detail {
const std::vector<SchemaMigration>& postgres_migrations();
const std::vector<SchemaMigration>& sqlite_migrations();
const std::vector<SchemaMigration>& provider_postgres_migrations();
const std::vector<SchemaMigration>& provider_sqlite_migrations();
}  // namespace idem::reference::detail
