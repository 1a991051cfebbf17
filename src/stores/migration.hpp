#pragma once
// idem's own versioned schema, embedded from sql/<backend>/NNNN_name.sql at build time.
#include <string_view>
#include <vector>

#include "idem/store.hpp"

namespace idem::detail {

namespace postgres_sql {
const std::vector<SchemaMigration>& migrations();
}
namespace sqlite_sql {
const std::vector<SchemaMigration>& migrations();
}

/// Refuses a MigrationSet that may not be applied (empty name, idem's own name).
void check_migration_set_name(std::string_view name, std::string_view backend);

}  // namespace idem::detail
