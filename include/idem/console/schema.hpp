#pragma once
/// \file
/// The web console's table (idem_console_replay, the replay audit): a MigrationSet of its
/// own, so that idem's own migrations (Store::migrate) create only the core's tables.

#include "idem/store.hpp"

namespace idem {

/// The console's migrations, recorded under the name "console". `idem migrate` applies
/// them; a program of your own that runs a Console applies them with
/// `store.migrate_set(console_migrations())` (safe to run again and from several
/// processes). A store migrated by an idem whose own migrations still created the table
/// keeps it and its rows: the migration only records itself there.
[[nodiscard]] const MigrationSet& console_migrations();

}  // namespace idem
