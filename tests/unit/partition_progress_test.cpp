// PartitionProgress as a plain class: commits only up to the lowest record not done, for
// records held one by one (the effect path) and whole batches (the batch path), across
// rewinds.
#include "consumer/positions/partition_progress.hpp"

#include <optional>
#include <vector>

#include <gtest/gtest.h>

namespace partition_progress_test {

using idem::detail::PartitionOffset;
using idem::detail::PartitionOutcome;
using idem::detail::PartitionProgress;
using idem::detail::TopicPartition;

const TopicPartition kP0{"t", 0};
const TopicPartition kP1{"t", 1};

TEST(PartitionProgress, NothingToCommitBeforeTheFirstRecordIsDone) {
  PartitionProgress o;
  o.received(kP0, 10);
  o.received(kP0, 11);
  o.done(kP0, 11);
  EXPECT_EQ(o.commit_position(kP0), std::nullopt);
  o.done(kP0, 10);
  EXPECT_EQ(o.commit_position(kP0), 12);
  EXPECT_EQ(o.held(kP0), 0u);
}

TEST(PartitionProgress, CommitsUpToTheLowestRecordNotDone) {
  PartitionProgress o;
  for (std::int64_t off = 0; off < 6; ++off) o.received(kP0, off);
  o.done(kP0, 0);
  o.done(kP0, 1);
  o.done(kP0, 3);
  o.done(kP0, 4);
  EXPECT_EQ(o.commit_position(kP0), 2) << "offset 2 holds the partition back";
  EXPECT_EQ(o.held(kP0), 4u) << "2, 3, 4 and 5 are still held";
  o.done(kP0, 2);
  EXPECT_EQ(o.commit_position(kP0), 5);
  o.done(kP0, 5);
  EXPECT_EQ(o.commit_position(kP0), 6);
}

TEST(PartitionProgress, GapsInOffsetsDoNotBlock) {
  PartitionProgress o;
  o.received(kP0, 3);
  o.received(kP0, 7);  // 4..6 compacted away, or transaction markers
  o.done(kP0, 3);
  EXPECT_EQ(o.commit_position(kP0), 4);
  o.done(kP0, 7);
  EXPECT_EQ(o.commit_position(kP0), 8);
}

TEST(PartitionProgress, RefusesOffsetsReceivedAgainAndKeepsPartitionsApart) {
  PartitionProgress o;
  EXPECT_TRUE(o.received(kP0, 5));
  EXPECT_FALSE(o.received(kP0, 5));
  EXPECT_FALSE(o.received(kP0, 4));
  EXPECT_TRUE(o.received(kP1, 1));
  EXPECT_EQ(o.next_expected(kP0), 6);
  o.done(kP1, 1);
  EXPECT_EQ(o.commit_position(kP1), 2);
  EXPECT_EQ(o.commit_position(kP0), std::nullopt);
}

TEST(PartitionProgress, RewindDropsWhatIsHeldFromThereAndExpectsItAgain) {
  PartitionProgress o;
  for (std::int64_t off = 0; off < 5; ++off) o.received(kP0, off);
  o.done(kP0, 0);
  o.rewind(kP0, 2);
  EXPECT_EQ(o.held(kP0), 1u) << "1 is still held; 2, 3 and 4 come again";
  EXPECT_EQ(o.next_expected(kP0), 2);
  EXPECT_FALSE(o.received(kP0, 1)) << "fetched before the rewind";
  EXPECT_TRUE(o.received(kP0, 2));
  o.done(kP0, 2);
  EXPECT_EQ(o.commit_position(kP0), 1) << "1 still holds it back";
  o.done(kP0, 1);
  EXPECT_EQ(o.commit_position(kP0), 3);
}

TEST(PartitionProgress, BatchIsDoneUpToItsRetryOrItsFirstRefusedLetter) {
  PartitionProgress o;
  EXPECT_EQ(o.settle_batch({kP0, 0, 10, std::nullopt, {}}, {}), std::nullopt);
  EXPECT_EQ(o.commit_position(kP0), 10);

  const std::vector<std::int64_t> refused{14, 12};
  EXPECT_EQ(o.settle_batch({kP0, 10, 20, 16, {}}, refused), 12)
      << "the first refused letter comes before the retry";
  EXPECT_EQ(o.commit_position(kP0), 12);
  EXPECT_EQ(o.next_expected(kP0), 12);

  EXPECT_EQ(o.settle_batch({kP0, 12, 12, 12, {}}, {}), 12) << "a retry at the batch's first record";
  EXPECT_EQ(o.commit_position(kP0), 12);
  EXPECT_EQ(o.settle_batch({kP0, 12, 15, std::nullopt, {}}, {}), std::nullopt);
  EXPECT_EQ(o.commit_position(kP0), 15);
}

TEST(PartitionProgress, MovedPositionsAreTakenOnce) {
  PartitionProgress o;
  EXPECT_TRUE(o.take_moved().empty());
  o.settle_batch({kP0, 0, 3, std::nullopt, {}}, {});
  o.settle_batch({kP1, 5, 6, std::nullopt, {}}, {});
  const std::vector<PartitionOffset> moved = o.take_moved();
  EXPECT_EQ(moved.size(), 2u);
  EXPECT_TRUE(o.take_moved().empty());
  o.settle_batch({kP0, 3, 3, 3, {}}, {});
  EXPECT_TRUE(o.take_moved().empty()) << "a retry at the next record moves nothing";
  const std::vector<TopicPartition> p0{kP0};
  const std::vector<PartitionOffset> positions = o.positions(p0);
  ASSERT_EQ(positions.size(), 1u);
  EXPECT_EQ(positions[0].offset, 3);
}

TEST(PartitionProgress, ForgetsRevokedPartitions) {
  PartitionProgress o;
  o.received(kP0, 1);
  o.done(kP0, 1);
  const std::vector<TopicPartition> gone{kP0};
  o.forget(gone);
  EXPECT_EQ(o.commit_position(kP0), std::nullopt);
  EXPECT_EQ(o.next_expected(kP0), std::nullopt);
  EXPECT_TRUE(o.received(kP0, 0)) << "a new assignment starts afresh";
}

using idem::StoredOffset;

StoredOffset row(std::int64_t next, std::vector<std::int64_t> letters = {}) {
  return {kP0.topic, kP0.partition, next, std::move(letters), {}};
}

TEST(PartitionProgressRowAfter, LettersAcknowledgedAboveThePositionAreStoredUntilPassed) {
  PartitionProgress o;
  for (std::int64_t off = 0; off < 5; ++off) o.received(kP0, off);
  // The effect path: 0's call is slow; 1 and 2 were dead-lettered and acknowledged.
  o.acknowledge_letter(kP0, 1);
  o.done(kP0, 1);
  o.acknowledge_letter(kP0, 2);
  o.done(kP0, 2);
  EXPECT_TRUE(o.letter_acknowledged(kP0, 2));
  EXPECT_EQ(o.row_after(kP0, std::vector<std::int64_t>{3}), row(0, {1, 2}))
      << "0 is not done: the position stays before it, the letters above it are recorded";
  o.done(kP0, 3);
  // A transaction applying 0 moves the position over 0..3; 4 stops it.
  EXPECT_EQ(o.row_after(kP0, std::vector<std::int64_t>{0}), row(4));
  o.done(kP0, 0);
  EXPECT_FALSE(o.letter_acknowledged(kP0, 2)) << "passed by the position: forgotten";
}

TEST(PartitionProgressRowAfter, ARecordHeldNotDoneStopsThePosition) {
  PartitionProgress o;
  for (std::int64_t off = 20; off < 24; ++off) o.received(kP0, off);
  o.done(kP0, 20);
  // 21 is calling; the transaction applies 22 and 23 only.
  EXPECT_EQ(o.row_after(kP0, std::vector<std::int64_t>{22, 23}), row(21));
  EXPECT_EQ(o.first_seen(kP0), 20);
}

}  // namespace partition_progress_test
