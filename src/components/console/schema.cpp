#include "idem/console/schema.hpp"

#include "console/migrations.hpp"

namespace idem {

const MigrationSet& console_migrations() {
  static const MigrationSet set{.name = "console",
                                .postgres = console::detail::postgres_migrations(),
                                .sqlite = console::detail::sqlite_migrations()};
  return set;
}

}  // namespace idem
