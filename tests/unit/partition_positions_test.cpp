// PartitionPositions over a real (in-memory SQLite) store: the rows a transaction writes,
// those the store holds already, positions moved with no transaction of their own, and
// the letters a stored row gives back after a restart.
#include "consumer/positions/partition_positions.hpp"

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "idem/store.hpp"

namespace partition_positions_test {

using idem::StoredOffset;
using idem::detail::PartitionOutcome;
using idem::detail::PartitionPositions;
using idem::detail::TopicPartition;

const TopicPartition kP0{"t", 0};

StoredOffset row(std::int64_t next, std::vector<std::int64_t> letters = {}) {
  return {kP0.topic, kP0.partition, next, std::move(letters), {}};
}

class PartitionPositionsRows : public ::testing::Test {
 protected:
  PartitionPositionsRows() {
    config_.group_id = "billing";
    store_->migrate();
  }

  /// What the store holds for the group, as a restart would read it.
  std::vector<StoredOffset> stored() {
    const std::atomic<bool> stop{false};
    return positions_.read(stop, 1);
  }

  idem::ConsumerConfig config_;
  idem::detail::LogFn log_ = [](std::string_view) {};
  std::unique_ptr<idem::Store> store_ = idem::open_store("sqlite://:memory:");
  PartitionPositions positions_{config_, *store_, log_};
};

TEST_F(PartitionPositionsRows, ABatchStoresItsDonePrefixUpToItsFirstLetter) {
  auto& o = positions_.progress();
  // The batch path: records 10..14 of which 12 is dead-lettered (a letter is done only
  // once acknowledged, after the commit), so the transaction stores 12.
  const PartitionOutcome batch{kP0, 10, 15, std::nullopt, {10, 11}};
  EXPECT_EQ(positions_.rows_after({&batch, 1}), std::vector<StoredOffset>{row(12)});
  o.settle_batch(batch, {});
  o.acknowledge_letter(kP0, 12);  // before settle in the consumer; passed by now
  EXPECT_EQ(o.commit_position(kP0), 15);
  positions_.committed(std::vector<StoredOffset>{row(12)});
  positions_.write_moved();
  EXPECT_EQ(stored(), std::vector<StoredOffset>{row(15)})
      << "the acknowledgement moved the position with no transaction: written on its own";
  const PartitionOutcome nothing_new{kP0, 15, 15, std::nullopt, {}};
  EXPECT_EQ(positions_.rows_after({&nothing_new, 1}), std::vector<StoredOffset>{})
      << "the store holds that row already";
}

TEST_F(PartitionPositionsRows, AStoredRowGivesItsLettersBackAfterARestart) {
  idem::ConsumerStats delta;
  const std::vector<StoredOffset> rows{row(5, {7, 9})};
  const auto starts = positions_.starts({&kP0, 1}, rows, {}, delta);
  EXPECT_EQ(starts, std::vector<std::optional<std::int64_t>>{5});
  const auto& o = positions_.progress();
  EXPECT_TRUE(o.letter_acknowledged(kP0, 7));
  EXPECT_TRUE(o.letter_acknowledged(kP0, 9));
  EXPECT_FALSE(o.letter_acknowledged(kP0, 8));
  // Records 5..7 done (7 skipped as acknowledged): 9 stays recorded above the position.
  const PartitionOutcome batch{kP0, 5, 8, std::nullopt, {5, 6, 7}};
  EXPECT_EQ(positions_.rows_after({&batch, 1}), std::vector<StoredOffset>{row(8, {9})});
  positions_.committed(std::vector<StoredOffset>{row(8, {9})});
  EXPECT_EQ(positions_.rows_after({&batch, 1}), std::vector<StoredOffset>{})
      << "the store holds that row already";
}

}  // namespace partition_positions_test
