#include "store_schema.hpp"

#include "idem/console/schema.hpp"
#include "idem/reference/schema.hpp"

namespace idem::cli {

MigrationReport migrate_store(Store& store, const MigrateOptions& options, bool reference) {
  MigrationReport report = store.migrate(options);
  (void)store.migrate_set(console_migrations());
  if (reference) (void)store.migrate_set(reference_migrations());
  return report;
}

}  // namespace idem::cli
