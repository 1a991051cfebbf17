#pragma once
// DDL for the RANGE-partitioned dedup table (IDEM-2 TTL, with its
// correction: partitioned on event_id, not on processed_at). Pure functions of
// the options and a point in time, so they can be checked without a server.
#include <chrono>
#include <string>
#include <vector>

#include "idem/store.hpp"

namespace idem::detail::pg {

/// One partition of processed_event: event ids born in [from, to).
struct PartitionSpec {
  std::string name;  ///< processed_event_pYYYYMMDD, or ..._pYYYYMMDDHH for sub-day periods
  std::chrono::sys_time<std::chrono::milliseconds> from;
  std::chrono::sys_time<std::chrono::milliseconds> to;
};

/// The partitions for `options` around `now`: the period containing `now`, plus
/// options.partitions_behind before it and options.partitions_ahead after it,
/// with boundaries at UTC multiples of options.partition_period since the epoch.
/// Throws Error(InvalidArgument) for a non-positive period or negative counts.
[[nodiscard]] std::vector<PartitionSpec> plan_partitions(const MigrateOptions& options,
                                                         std::chrono::system_clock::time_point now);

/// `CREATE TABLE ... PARTITION OF processed_event FOR VALUES FROM (...) TO (...)`.
[[nodiscard]] std::string partition_ddl(const PartitionSpec& spec);

/// The whole replacement for migration 0001: the partitioned parent, the planned
/// partitions, the DEFAULT partition and the processed_at index.
[[nodiscard]] std::string partitioned_processed_event_ddl(
    const MigrateOptions& options, std::chrono::system_clock::time_point now);

/// The name migration 1 is recorded under when it created the partitioned table.
inline constexpr const char* kPartitionedMigrationName = "0001_processed_event_partitioned";

}  // namespace idem::detail::pg
