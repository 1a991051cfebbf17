// ContiguousOffsets as a plain class: commits only up to the lowest unfinished offset.
#include "consumer/contiguous_offsets.hpp"

#include <optional>
#include <vector>

#include <gtest/gtest.h>

namespace {

using idem::detail::ContiguousOffsets;
using idem::detail::TopicPartition;

const TopicPartition kP0{"t", 0};
const TopicPartition kP1{"t", 1};

TEST(ContiguousOffsets, NothingToCommitBeforeTheFirstRecordIsFinished) {
  ContiguousOffsets o;
  o.received(kP0, 10);
  o.received(kP0, 11);
  o.finished(kP0, 11);
  EXPECT_EQ(o.commit_position(kP0), std::nullopt);
  o.finished(kP0, 10);
  EXPECT_EQ(o.commit_position(kP0), 12);
  EXPECT_EQ(o.held(kP0), 0u);
}

TEST(ContiguousOffsets, CommitsUpToTheLowestUnfinishedOffset) {
  ContiguousOffsets o;
  for (std::int64_t off = 0; off < 6; ++off) o.received(kP0, off);
  o.finished(kP0, 0);
  o.finished(kP0, 1);
  o.finished(kP0, 3);
  o.finished(kP0, 4);
  EXPECT_EQ(o.commit_position(kP0), 2) << "offset 2 holds the partition back";
  EXPECT_EQ(o.held(kP0), 4u) << "2, 3, 4 and 5 are still held";
  o.finished(kP0, 2);
  EXPECT_EQ(o.commit_position(kP0), 5);
  o.finished(kP0, 5);
  EXPECT_EQ(o.commit_position(kP0), 6);
}

TEST(ContiguousOffsets, GapsInOffsetsDoNotBlock) {
  ContiguousOffsets o;
  o.received(kP0, 3);
  o.received(kP0, 7);  // 4..6 compacted away, or transaction markers
  o.finished(kP0, 3);
  EXPECT_EQ(o.commit_position(kP0), 4);
  o.finished(kP0, 7);
  EXPECT_EQ(o.commit_position(kP0), 8);
}

TEST(ContiguousOffsets, RefusesOffsetsReceivedAgainAndKeepsPartitionsApart) {
  ContiguousOffsets o;
  EXPECT_TRUE(o.received(kP0, 5));
  EXPECT_FALSE(o.received(kP0, 5));
  EXPECT_FALSE(o.received(kP0, 4));
  EXPECT_TRUE(o.received(kP1, 1));
  EXPECT_EQ(o.next_expected(kP0), 6);
  o.finished(kP1, 1);
  EXPECT_EQ(o.commit_position(kP1), 2);
  EXPECT_EQ(o.commit_position(kP0), std::nullopt);
}

TEST(ContiguousOffsets, ForgetsRevokedPartitions) {
  ContiguousOffsets o;
  o.received(kP0, 1);
  o.finished(kP0, 1);
  const std::vector<TopicPartition> gone{kP0};
  o.forget(gone);
  EXPECT_EQ(o.commit_position(kP0), std::nullopt);
  EXPECT_EQ(o.next_expected(kP0), std::nullopt);
  EXPECT_TRUE(o.received(kP0, 0)) << "a new assignment starts afresh";
}

}  // namespace
