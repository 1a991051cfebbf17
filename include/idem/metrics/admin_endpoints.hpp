#pragma once
/// \file
/// The admin endpoints (/metrics, /healthz, /readyz) on any cpp-httplib server: the
/// AdminServer's own, or the web console's when a consumer serves both on one port
/// (admin.console). Including this header needs cpp-httplib's.
#include <httplib.h>

#include <vector>

#include "idem/metrics/metrics.hpp"

namespace idem {

/// Adds the three endpoints to `server`. `metrics` must outlive it.
void mount_admin_endpoints(httplib::Server& server, const Metrics& metrics,
                           std::vector<ReadinessCheck> checks);

}  // namespace idem
