#include "console/dedup_stats.hpp"

namespace idem::console {

namespace {

using Millis = std::chrono::sys_time<std::chrono::milliseconds>;

std::optional<Millis> optional_ms(const RowView& row, std::size_t col) {
  if (row.is_null(col)) return std::nullopt;
  return Millis(std::chrono::milliseconds(row.int64(col)));
}

std::optional<Uuid> optional_uuid(const RowView& row, std::size_t col) {
  if (row.is_null(col)) return std::nullopt;
  return row.uuid(col);
}

}  // namespace

std::vector<DedupGroupStats> dedup_group_stats(Store& store) {
  // PostgreSQL (before 16) has no min/max over uuid; the text form orders like the bytes
  // (fixed-width lower-case hex), so the text's extremes are the UUIDs' extremes.
  const char* sql =
      store.backend() == Backend::Postgres
          ? "SELECT consumer_group, count(*), min(event_id::text), max(event_id::text), "
            "(extract(epoch from min(processed_at)) * 1000)::bigint, "
            "(extract(epoch from max(processed_at)) * 1000)::bigint "
            "FROM processed_event GROUP BY consumer_group ORDER BY consumer_group"
          : "SELECT consumer_group, count(*), min(event_id), max(event_id), min(processed_at), "
            "max(processed_at) FROM processed_event GROUP BY consumer_group ORDER BY "
            "consumer_group";
  auto tx = store.begin_read();
  std::vector<DedupGroupStats> out;
  for (const RowView row : tx->execute(sql)) {
    out.push_back({std::string(row.text(0)), row.int64(1), optional_uuid(row, 2),
                   optional_uuid(row, 3), optional_ms(row, 4), optional_ms(row, 5)});
  }
  tx->commit();
  return out;
}

}  // namespace idem::console
