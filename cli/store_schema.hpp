#pragma once
// The schema the CLI's commands create when they migrate a store (`idem migrate`, and
// `idem consume`, `idem orders --migrate` and `idem demo` on start).
#include "idem/store.hpp"

namespace idem::cli {

/// Applies idem's own migrations (with `options`), the console's (a console may run on
/// any store the CLI migrated: `idem console`, or a consumer's admin.console) and, when
/// `reference`, the reference system's. Returns the report of idem's own.
/// \throws Error as Store::migrate and Store::migrate_set do.
MigrationReport migrate_store(Store& store, const MigrateOptions& options, bool reference);

}  // namespace idem::cli
