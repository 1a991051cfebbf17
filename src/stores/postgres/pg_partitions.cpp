#include "stores/postgres/pg_partitions.hpp"

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/uuid.hpp"

namespace idem::detail::pg {

namespace {

using Millis = std::chrono::sys_time<std::chrono::milliseconds>;

// A UUIDv7 timestamp has 48 bits of Unix milliseconds.
constexpr std::int64_t kMaxUuidMillis = (std::int64_t{1} << 48) - 1;
// Far more partitions than any retention needs; a typo (days given as hours)
// should fail loudly instead of creating a hundred thousand tables.
constexpr std::int64_t kMaxPartitions = 10000;

std::string partition_name(Millis from, std::chrono::hours period) {
  const auto day = std::chrono::floor<std::chrono::days>(from);
  const std::chrono::year_month_day ymd(day);
  const auto hour = std::chrono::duration_cast<std::chrono::hours>(from - day).count();
  const std::string date =
      fmt::format("{:04}{:02}{:02}", static_cast<int>(ymd.year()),
                  static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()));
  // Whole-day periods start at midnight UTC, so the date names them; any other
  // period can start at another hour and needs the hour in the name.
  if (period % std::chrono::hours(24) == std::chrono::hours(0)) {
    return fmt::format("processed_event_p{}", date);
  }
  return fmt::format("processed_event_p{}{:02}", date, hour);
}

std::string uuid_literal(Millis at) {
  return Uuid::lower_bound_for(at).to_string();
}

}  // namespace

std::vector<PartitionSpec> plan_partitions(const MigrateOptions& options,
                                           std::chrono::system_clock::time_point now) {
  if (options.partition_period <= std::chrono::hours(0)) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "partition_period must be at least one hour");
  }
  if (options.partitions_behind < 0 || options.partitions_ahead < 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "partitions_behind and partitions_ahead must not be negative");
  }
  const std::int64_t count =
      std::int64_t{options.partitions_behind} + std::int64_t{options.partitions_ahead} + 1;
  if (count > kMaxPartitions) {
    throw Error(
        ErrorCode::InvalidArgument, ErrorSource::Config,
        fmt::format("{} partitions requested; at most {} are allowed", count, kMaxPartitions));
  }
  const std::chrono::milliseconds period = options.partition_period;
  const Millis now_ms = std::chrono::floor<std::chrono::milliseconds>(now);
  // The start of the period holding `now`: a floor, also for times before 1970.
  const auto since_epoch = now_ms.time_since_epoch();
  const Millis current(since_epoch - (((since_epoch % period) + period) % period));
  const Millis first = current - options.partitions_behind * period;
  const Millis last = current + (options.partitions_ahead + 1) * period;
  if (first.time_since_epoch().count() < 0 || last.time_since_epoch().count() > kMaxUuidMillis) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "the partition range falls outside what a UUIDv7 timestamp can express "
                "(1970 to year 10889); check the clock");
  }
  std::vector<PartitionSpec> out;
  out.reserve(static_cast<std::size_t>(count));
  for (Millis from = first; from < last; from += period) {
    out.push_back(
        PartitionSpec{partition_name(from, options.partition_period), from, from + period});
  }
  return out;
}

std::string partition_ddl(const PartitionSpec& spec) {
  // Bounds are the smallest UUIDs of the boundary milliseconds: every UUIDv7 born
  // in [from, to) sorts in ['lower_bound(from)', 'lower_bound(to)'), and the upper
  // bound of a range partition is exclusive, so neighbours neither gap nor overlap.
  return fmt::format(
      "CREATE TABLE {} PARTITION OF processed_event FOR VALUES FROM ('{}') TO ('{}');\n", spec.name,
      uuid_literal(spec.from), uuid_literal(spec.to));
}

std::string partitioned_processed_event_ddl(const MigrateOptions& options,
                                            std::chrono::system_clock::time_point now) {
  // Same columns and key as sql/postgres/0001_processed_event.sql. The partition
  // key is event_id, which is part of the primary key, so the key stays
  // (event_id, consumer_group): a redelivery conflicts with the first row whatever
  // the time, unlike a table partitioned on processed_at (IDEM-2 TTL).
  std::string ddl =
      "CREATE TABLE processed_event (\n"
      "  event_id       uuid        NOT NULL,\n"
      "  consumer_group text        NOT NULL,\n"
      "  processed_at   timestamptz NOT NULL DEFAULT now(),\n"
      "  PRIMARY KEY (event_id, consumer_group)\n"
      ") PARTITION BY RANGE (event_id);\n";
  for (const PartitionSpec& spec : plan_partitions(options, now)) ddl += partition_ddl(spec);
  // Ids outside the created range (born long ago, or far in the future, or not
  // UUIDv7 at all) land here and are still deduplicated. Retention (src/retention/) keeps
  // partitions created ahead of time and drops expired ones whole.
  ddl += "CREATE TABLE processed_event_default PARTITION OF processed_event DEFAULT;\n";
  // On the parent: PostgreSQL creates the matching index on every partition.
  ddl += "CREATE INDEX ix_processed_event_processed_at ON processed_event (processed_at);\n";
  return ddl;
}

}  // namespace idem::detail::pg
