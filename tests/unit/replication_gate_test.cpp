// publish_after = replicated, the parts that need no server: which position a quorum of
// standbys holds, positions of two timelines, and the start-up warning about what a
// failover can take back (outbox/replication_gate.hpp). The gate against real standbys:
// tests/fault/relay_failover_test.cpp.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "outbox/replication_gate.hpp"

namespace idem::detail {
namespace replication_gate_test {

StandbyReplication standby(std::string name, std::optional<std::uint64_t> flush,
                           std::string sync_state = "async") {
  return StandbyReplication{std::move(name), flush, std::move(sync_state)};
}

ReplicationView view_of(std::vector<StandbyReplication> standbys, std::uint32_t timeline = 1) {
  return ReplicationView{timeline, std::move(standbys), "on", 0, ""};
}

TEST(ReplicationGate, AQuorumHoldsWhatItsLeastAdvancedMemberFlushed) {
  const ReplicationView v = view_of({standby("a", 300, "quorum"), standby("b", 100, "quorum"),
                                     standby("c", 200, "quorum"), standby("d", 50, "quorum")});
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
  const ReplicationView v =
      view_of({standby("a", std::nullopt, "quorum"), standby("b", 70, "quorum")});
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
  const ReplicationView two = view_of({standby("a", 10, "quorum"), standby("b", 10, "quorum")});
  EXPECT_FALSE(failover_warning(two, PublishAfter::Replicated, {{}, 2}));
  EXPECT_FALSE(failover_warning(two, PublishAfter::Replicated, {{"a", "b"}, 2}));
  const auto outside = failover_warning(two, PublishAfter::Replicated, {{"a"}, 1});
  ASSERT_TRUE(outside);
  EXPECT_NE(outside->find("standbys b are not among relay.standbys"), std::string::npos)
      << *outside;
  const auto quorum = failover_warning(two, PublishAfter::Replicated, {{}, 1});
  ASSERT_TRUE(quorum);
  EXPECT_NE(quorum->find("set relay.standby_quorum = 2"), std::string::npos) << *quorum;
  // Without relay.standbys, an asynchronous standby does not count: a failover to it can
  // take back what was published.
  const auto async = failover_warning(view_of({standby("a", 10, "sync"), standby("b", 10)}),
                                      PublishAfter::Replicated, {{}, 1});
  ASSERT_TRUE(async);
  EXPECT_NE(async->find("walsenders b are not synchronous"), std::string::npos) << *async;
  // Two walsenders under one declared name are one standby: a quorum of 1 covers it.
  EXPECT_FALSE(failover_warning(view_of({standby("a", 10), standby("a", 20)}),
                                PublishAfter::Replicated, {{"a"}, 1}));
}

TEST(ReplicationGate, ADeclaredStandbyCountsOnceWhateverItsWalsenders) {
  // "a" twice (reconnecting while its old walsender lingers, or two processes giving one
  // name): one standby, holding the least of the two, never two toward the quorum.
  const ReplicationView v =
      view_of({standby("a", 500), standby("a", 200), standby("b", 100), standby("c", 900)});
  EXPECT_FALSE(quorum_position(v, {{"a", "b", "x"}, 3})) << "a counted twice";
  EXPECT_EQ(quorum_position(v, {{"a", "b"}, 2})->lsn, 100U);
  EXPECT_EQ(quorum_position(v, {{"a"}, 1})->lsn, 200U) << "the least of a's walsenders";
  const std::vector<CountedStandby> counted = counted_standbys(v, {{"b", "a"}, 1});
  ASSERT_EQ(counted.size(), 2U);
  EXPECT_EQ(counted[0].name, "a");
  ASSERT_TRUE(counted[0].flush_lsn);
  EXPECT_EQ(*counted[0].flush_lsn, 200U);
  EXPECT_EQ(counted[1].name, "b");
  // One of a's walsenders has reported nothing yet: a holds nothing yet.
  const ReplicationView reconnecting = view_of({standby("a", 500), standby("a", std::nullopt)});
  EXPECT_FALSE(quorum_position(reconnecting, {{"a"}, 1}));
}

TEST(ReplicationGate, WithoutDeclaredStandbysOnlyThoseThePrimaryMakesSynchronousCount) {
  // A WAL archiver (pg_receivewal) or a backup streaming WAL reports a flush position as a
  // standby does, asynchronous: it never counts. Nor does a potential synchronous standby
  // (FIRST 1 (a, b): b waits its turn).
  const ReplicationView v = view_of({standby("pg_receivewal", 900), standby("base_backup", 800),
                                     standby("b", 700, "potential"), standby("a", 100, "sync")});
  EXPECT_EQ(quorum_position(v, {{}, 1})->lsn, 100U);
  EXPECT_FALSE(quorum_position(v, {{}, 2}));
  ASSERT_EQ(counted_standbys(v, {{}, 1}).size(), 1U);
  EXPECT_EQ(counted_standbys(v, {{}, 1})[0].name, "a");
  // ANY 2 (a, b, c): every one of them is "quorum", each counted once by name.
  const ReplicationView any = view_of({standby("a", 300, "quorum"), standby("a", 250, "quorum"),
                                       standby("b", 200, "quorum"), standby("c", 100)});
  EXPECT_EQ(quorum_position(any, {{}, 2})->lsn, 200U);
  EXPECT_FALSE(quorum_position(any, {{}, 3}));
  // An undeclared walsender never counts, however far it has flushed.
  EXPECT_FALSE(quorum_position(v, {{"x"}, 1}));
}

TEST(ReplicationGate, TheStartLineSaysWhichWalsendersCount) {
  ReplicationView v = view_of({standby("a", 0x3000000, "sync"), standby("a", 0x2000000, "sync"),
                               standby("pg_receivewal", 0x4000000)});
  v.synchronous_standby_names = "FIRST 1 (a, b)";
  EXPECT_EQ(describe_counting(v, {{}, 1}),
            "idem relay: publish_after = replicated: a batch waits until any 1 of the standbys "
            "the primary makes synchronous flushed its commits (synchronous_standby_names = "
            "'FIRST 1 (a, b)'); counting now: a (2 walsenders under this name, the least flushed "
            "to 0/2000000); not counting: pg_receivewal (async, not synchronous)");
  EXPECT_EQ(describe_counting(v, {{"a", "b"}, 2}),
            "idem relay: publish_after = replicated: a batch waits until any 2 of a,b flushed "
            "its commits; counting now: a (2 walsenders under this name, the least flushed to "
            "0/2000000), b (not connected); not counting: pg_receivewal (not in "
            "relay.standbys)");
  EXPECT_EQ(describe_counting(view_of({}), {{}, 1}),
            "idem relay: publish_after = replicated: a batch waits until any 1 of the standbys "
            "the primary makes synchronous flushed its commits (synchronous_standby_names = "
            "''); counting now: none; not counting: none");
}

}  // namespace replication_gate_test
}  // namespace idem::detail
