#pragma once
// The reference system's tables, embedded from sql/reference/<backend>/NNNN_name.sql.
#include <vector>

#include "idem/store.hpp"

namespace idem::reference::detail {
const std::vector<SchemaMigration>& postgres_migrations();
const std::vector<SchemaMigration>& sqlite_migrations();
}  // namespace idem::reference::detail
