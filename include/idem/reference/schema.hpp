#pragma once
/// \file
/// The reference system's tables (orders, billing_ledger, effect_log,
/// analytics_customer_revenue): a MigrationSet of its own, applied after idem's.

#include "idem/store.hpp"

namespace idem {

/// The reference system's migrations, recorded under the name "reference".
[[nodiscard]] const MigrationSet& reference_migrations();

/// The payment provider's tables (provider_idempotency_key, provider_charge), recorded
/// under the name "payment_provider". PaymentProvider applies them when it starts; the
/// unrecorded tables of an earlier release's provider are adopted and upgraded (keys
/// scoped by client, method and path, docs/schema.md).
[[nodiscard]] const MigrationSet& payment_provider_migrations();

/// Applies idem's own migrations (with `options`), then the reference system's.
/// Returns the report of idem's own; safe to run again and from several processes.
/// \throws Error as Store::migrate and Store::migrate_set do.
MigrationReport migrate_reference_system(Store& store, const MigrateOptions& options = {});

}  // namespace idem
