#include "stores/maintenance_operations.hpp"

namespace idem::detail {

std::unique_ptr<MaintenanceOperations> make_maintenance_operations(Store& store,
                                                                   const Clock& clock) {
  switch (store.backend()) {
    case Backend::Postgres: return pg::make_maintenance_operations(store);
    case Backend::Sqlite: return sqlite::make_maintenance_operations(store, clock);
  }
  return sqlite::make_maintenance_operations(store,
                                             clock);  // unreachable: every Backend is handled
}

}  // namespace idem::detail
