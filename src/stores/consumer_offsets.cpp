#include "idem/consumer_offsets.hpp"

#include <charconv>

#include <fmt/format.h>

#include "idem/error.hpp"

namespace idem {

namespace {

std::string letters_text(std::span<const std::int64_t> letters) {
  return fmt::format("{}", fmt::join(letters, ","));
}

std::vector<std::int64_t> parse_letters(std::string_view text) {
  std::vector<std::int64_t> out;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    std::int64_t value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (ec != std::errc() || end != item.data() + item.size()) {
      throw Error(ErrorCode::Schema, ErrorSource::Config,
                  fmt::format("idem_consumer_offsets.acknowledged_letters holds '{}', not a "
                              "list of offsets",
                              text));
    }
    out.push_back(value);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace

std::vector<StoredOffset> read_stored_offsets(Transaction& tx, std::string_view group,
                                              std::string_view topic) {
  const Rows rows = tx.execute(
      "SELECT topic, kafka_partition, next_offset, acknowledged_letters, "
      "CAST(updated_at AS TEXT) FROM idem_consumer_offsets WHERE consumer_group = $1 AND "
      "($2 = '' OR topic = $2) ORDER BY topic, kafka_partition",
      group, topic);
  std::vector<StoredOffset> out;
  out.reserve(rows.size());
  for (const RowView row : rows) {
    out.push_back({std::string(row.text(0)), static_cast<std::int32_t>(row.int64(1)), row.int64(2),
                   parse_letters(row.text(3)), std::string(row.text(4))});
  }
  return out;
}

void write_stored_offsets(Transaction& tx, std::string_view group,
                          std::span<const StoredOffset> offsets) {
  for (const StoredOffset& o : offsets) {
    tx.execute_deferred(
        "INSERT INTO idem_consumer_offsets (consumer_group, topic, kafka_partition, next_offset, "
        "acknowledged_letters) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (consumer_group, topic, "
        "kafka_partition) DO UPDATE SET next_offset = excluded.next_offset, acknowledged_letters "
        "= excluded.acknowledged_letters, updated_at = CURRENT_TIMESTAMP",
        group, o.topic, static_cast<std::int64_t>(o.partition), o.next_offset,
        letters_text(o.acknowledged_letters));
  }
}

std::int64_t delete_stored_offsets(Transaction& tx, std::string_view group,
                                   std::string_view topic) {
  return tx
      .execute(
          "DELETE FROM idem_consumer_offsets WHERE consumer_group = $1 AND ($2 = '' OR "
          "topic = $2)",
          group, topic)
      .affected();
}

}  // namespace idem
