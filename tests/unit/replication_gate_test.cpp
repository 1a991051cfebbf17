// publish_after = replicated, the parts that need no server: which position a quorum of
// standbys holds, positions of two timelines, and the start-up warning about what a
// failover can take back (outbox/replication_gate.hpp). The gate against real standbys:
// tests/fault/relay_failover_test.cpp.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "outbox/replication_gate.hpp"

namespace idem::detail {
namespace {

StandbyReplication standby(std::string name, std::optional<std::uint64_t> flush,
                           std::string sync_state = "async") {
  return StandbyReplication{std::move(name), flush, std::move(sync_state)};
}

ReplicationView view_of(std::vector<StandbyReplication> standbys, std::uint32_t timeline = 1) {
  return ReplicationView{timeline, std::move(standbys), "on"};
}

TEST(ReplicationGate, AQuorumHoldsWhatItsLeastAdvancedMemberFlushed) {
  const ReplicationView v =
      view_of({standby("a", 300), standby("b", 100), standby("c", 200), standby("d", 50)});
  EXPECT_EQ(quorum_position(v, {{}, 1})->lsn, 300U) << "any one standby: the most advanced";
  EXPECT_EQ(quorum_position(v, {{}, 3})->lsn, 100U);
  EXPECT_EQ(quorum_position(v, {{"b", "d"}, 1})->lsn, 100U) << "only the named ones count";
  EXPECT_EQ(quorum_position(v, {{"b", "d"}, 2})->lsn, 50U);
  EXPECT_FALSE(quorum_position(v, {{"a", "x"}, 2})) << "x is not connected";
  EXPECT_FALSE(quorum_position(v, {{}, 5})) << "fewer standbys than the quorum";
  EXPECT_EQ(quorum_position(v, {{}, 1})->timeline, 1U);
}

TEST(ReplicationGate, AStandbyThatReportsNoPositionDoesNotCount) {
  // Hidden from a role without pg_monitor, or a pg_basebackup stream: no flush position.
  const ReplicationView v = view_of({standby("a", std::nullopt), standby("b", 70)});
  EXPECT_EQ(quorum_position(v, {{}, 1})->lsn, 70U);
  EXPECT_FALSE(quorum_position(v, {{"a"}, 1}));
  EXPECT_FALSE(quorum_position(view_of({}), {{}, 1})) << "no standby: nothing is replicated";
}

TEST(ReplicationGate, PositionsOfAnotherTimelineNeverCover) {
  // A batch claimed on the old primary (timeline 1) is not covered by what the promoted
  // standby's own standbys flushed on timeline 2, however far that is.
  const WalPosition claimed{1, 5000};
  EXPECT_TRUE((WalPosition{1, 5000}).covers(claimed));
  EXPECT_FALSE((WalPosition{1, 4999}).covers(claimed));
  EXPECT_FALSE((WalPosition{2, 900000}).covers(claimed));
}

TEST(ReplicationGate, FormatsAnLsnAsPostgresqlDoes) {
  EXPECT_EQ(format_lsn(0), "0/0");
  EXPECT_EQ(format_lsn((std::uint64_t{0x16} << 32) | 0xB374D848U), "16/B374D848");
}

TEST(ReplicationGate, WarnsWhenACommittedRelayHasAsynchronousStandbys) {
  const auto warning =
      failover_warning(view_of({standby("node_b", 10)}), PublishAfter::Committed, StandbyQuorum{});
  ASSERT_TRUE(warning);
  EXPECT_NE(warning->find("asynchronous standbys (node_b)"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("relay.publish_after = replicated"), std::string::npos);

  EXPECT_FALSE(failover_warning(view_of({}), PublishAfter::Committed, {})) << "no standby";
  EXPECT_FALSE(failover_warning(view_of({standby("s", 10, "sync")}), PublishAfter::Committed, {}))
      << "synchronous standbys hold every commit already";
  ReplicationView local_commits = view_of({standby("s", 10, "sync")});
  local_commits.synchronous_commit = "local";
  ASSERT_TRUE(failover_warning(local_commits, PublishAfter::Committed, {}));
  EXPECT_NE(failover_warning(local_commits, PublishAfter::Committed, {})->find("'local'"),
            std::string::npos);
  const auto hidden =
      failover_warning(view_of({standby("", std::nullopt, "")}), PublishAfter::Committed, {});
  ASSERT_TRUE(hidden);
  EXPECT_NE(hidden->find("grant it pg_monitor"), std::string::npos) << *hidden;
}

TEST(ReplicationGate, WarnsWhenAReplicatedRelayLeavesAPromotableStandbyOut) {
  const ReplicationView two = view_of({standby("a", 10), standby("b", 10)});
  EXPECT_FALSE(failover_warning(two, PublishAfter::Replicated, {{}, 2}));
  EXPECT_FALSE(failover_warning(two, PublishAfter::Replicated, {{"a", "b"}, 2}));
  const auto outside = failover_warning(two, PublishAfter::Replicated, {{"a"}, 1});
  ASSERT_TRUE(outside);
  EXPECT_NE(outside->find("standbys b are not among relay.standbys"), std::string::npos)
      << *outside;
  const auto quorum = failover_warning(two, PublishAfter::Replicated, {{}, 1});
  ASSERT_TRUE(quorum);
  EXPECT_NE(quorum->find("set relay.standby_quorum = 2"), std::string::npos) << *quorum;
}

}  // namespace
}  // namespace idem::detail
