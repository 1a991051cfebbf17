#pragma once
/// \file
/// The reference system's tables (orders, billing_ledger, effect_log,
/// analytics_customer_revenue): a MigrationSet of its own, applied after idem's.

#include "idem/store.hpp"

namespace idem {

/// The reference system's migrations, recorded under the name "reference".
[[nodiscard]] const MigrationSet& reference_migrations();

/// Applies idem's own migrations (with `options`), then the reference system's.
/// Returns the report of idem's own; safe to run again and from several processes.
/// \throws Error as Store::migrate and Store::migrate_set do.
MigrationReport migrate_reference_system(Store& store, const MigrateOptions& options = {});

}  // namespace idem
