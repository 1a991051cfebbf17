#pragma once
/// \file
/// Consumer positions kept in the store (table idem_consumer_offsets), in the transaction
/// of the dedup marks and effects they cover: a failover that takes the effects back takes
/// the position back with them, and the consumer starts again from there
/// (docs/consumer-offsets.md). The consumer writes and reads them itself
/// (ConsumerConfig::offsets_in_store); these functions are for tools (`idem offsets`).

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "idem/store.hpp"

namespace idem {

/// One partition's row: where the group goes on, and the records above that whose letters
/// (dead letters, retry-topic letters) the broker already acknowledged.
struct StoredOffset {
  std::string topic;
  std::int32_t partition = 0;
  std::int64_t next_offset = 0;                    ///< the next record to consume
  std::vector<std::int64_t> acknowledged_letters;  ///< above next_offset, ascending
  std::string updated_at;                          ///< as the store prints it; read only

  friend bool operator==(const StoredOffset& a, const StoredOffset& b) {
    return a.topic == b.topic && a.partition == b.partition && a.next_offset == b.next_offset &&
           a.acknowledged_letters == b.acknowledged_letters;
  }
};

/// The rows of `group`, by topic and partition; of `topic` only when it is not empty.
/// \throws Error like Transaction::execute().
[[nodiscard]] std::vector<StoredOffset> read_stored_offsets(Transaction& tx, std::string_view group,
                                                            std::string_view topic = {});

/// Writes (inserts or replaces) the rows of `offsets` for `group` in `tx`, as deferred
/// statements (Transaction::execute_deferred: their errors surface at the next sync or
/// commit). \throws Error like Transaction::execute_deferred().
void write_stored_offsets(Transaction& tx, std::string_view group,
                          std::span<const StoredOffset> offsets);

/// Deletes the rows of `group` (of `topic` only when not empty); returns how many.
std::int64_t delete_stored_offsets(Transaction& tx, std::string_view group,
                                   std::string_view topic = {});

}  // namespace idem
