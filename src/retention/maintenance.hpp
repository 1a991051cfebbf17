#pragma once
// run_maintenance with a stop flag, for MaintenanceTask (and tests): checked between
// batches and steps, so stopping waits for one batch, not for a whole pass.
#include <atomic>

#include "idem/retention.hpp"

namespace idem::detail {

MaintenanceReport run_maintenance(Store& store, const RetentionPolicy& policy,
                                  const std::atomic<bool>& stop);

}  // namespace idem::detail
