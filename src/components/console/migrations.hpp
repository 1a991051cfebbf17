#pragma once
// The console's table, embedded from sql/console/<backend>/NNNN_name.sql.
#include <vector>

#include "idem/store.hpp"

namespace idem::console::detail {
const std::vector<SchemaMigration>& postgres_migrations();
const std::vector<SchemaMigration>& sqlite_migrations();
}  // namespace idem::console::detail
