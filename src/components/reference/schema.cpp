#include "idem/reference/schema.hpp"

#include "reference/migrations.hpp"

namespace idem {

const MigrationSet& reference_migrations() {
  static const MigrationSet set{.name = "reference",
                                .postgres = reference::detail::postgres_migrations(),
                                .sqlite = reference::detail::sqlite_migrations()};
  return set;
}

const MigrationSet& payment_provider_migrations() {
  static const MigrationSet set{.name = "payment_provider",
                                .postgres = reference::detail::provider_postgres_migrations(),
                                .sqlite = reference::detail::provider_sqlite_migrations()};
  return set;
}

MigrationReport migrate_reference_system(Store& store, const MigrateOptions& options) {
  MigrationReport report = store.migrate(options);
  (void)store.migrate_set(reference_migrations());
  return report;
}

}  // namespace idem
