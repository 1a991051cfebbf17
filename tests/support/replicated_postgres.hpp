#pragma once
// A real PostgreSQL primary with one streaming standby, on loopback, in a temporary
// directory of its own, for failover tests and benchmarks: made with initdb and
// pg_basebackup, driven with pg_ctl, and broken the way a host crash breaks it.
//
//   ReplicatedPostgres cluster(*postgres_binaries());   // primary + asynchronous standby
//   open_store(cluster.url());       // names both nodes; libpq finds the primary
//   cluster.hold_back_standby();     // the primary's commits from now on stay on it
//   ... commits ...
//   cluster.crash_primary();         // SIGKILL: postmaster and every child
//   cluster.promote_standby();       // the standby is the primary now
//   cluster.rebuild_standby();       // the old primary, rebuilt as the new standby
//
// The two nodes keep their names and ports (node_a, node_b) and swap roles at every
// promotion. Each standby's application_name is its node name, so
// pg_stat_replication on the primary names it. Only processes this cluster started are
// ever signalled (the postmaster in its postmaster.pid and that postmaster's children).
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace idem::test {

/// Where the PostgreSQL server programs are and which user runs them: what
/// scripts/with-postgres.sh exports (IDEM_TEST_PG_BIN, IDEM_TEST_PG_RUN_AS); nullopt
/// when IDEM_TEST_PG_BIN is unset.
struct PostgresBinaries {
  std::string bin_dir;  ///< initdb, pg_ctl, pg_basebackup, postgres
  std::string run_as;   ///< empty: run as this process's user (PostgreSQL refuses root)
};
[[nodiscard]] std::optional<PostgresBinaries> postgres_binaries();

struct ReplicatedPostgresOptions {
  /// The standby is synchronous (synchronous_standby_names = '*' on both nodes, so also
  /// after a promotion): a commit returns once the standby flushed it.
  bool synchronous = false;
  /// fsync on: what figures are measured with. The failover tests leave it off: they
  /// kill processes, not the operating system, so nothing written is lost either way.
  bool fsync = false;
  std::string database = "idem_test";  ///< created on the primary at start
};

class ReplicatedPostgres {
 public:
  /// Creates and starts the primary (node_a) and its standby (node_b), creates the
  /// database, and returns once the standby streams. Throws std::runtime_error naming
  /// the step that failed and the end of its log.
  explicit ReplicatedPostgres(PostgresBinaries binaries, ReplicatedPostgresOptions options = {});
  /// Kills both servers (as crash_primary does) and removes the directory.
  ~ReplicatedPostgres();
  ReplicatedPostgres(const ReplicatedPostgres&) = delete;
  ReplicatedPostgres& operator=(const ReplicatedPostgres&) = delete;

  /// A store URL naming both nodes, `target_session_attrs=read-write` (idem's default
  /// for several hosts): libpq connects to whichever is the primary now.
  [[nodiscard]] std::string url() const;
  /// The current primary alone.
  [[nodiscard]] std::string primary_url() const;
  /// The application_names of both nodes (either may be the standby).
  [[nodiscard]] std::vector<std::string> node_names() const;
  /// The current standby's name.
  [[nodiscard]] const std::string& standby_name() const;
  /// Promotions so far.
  [[nodiscard]] int promotions() const noexcept { return promotions_; }

  /// Holds the standby back: SIGSTOPs the primary's walsender serving it, so no commit
  /// of the primary from now on reaches it (wal_sender_timeout and wal_receiver_timeout
  /// are 0, so neither side gives up on the stopped connection). Until crash_primary().
  void hold_back_standby();
  /// Kills the primary as a host crash would: stops its postmaster (so that it starts
  /// nothing more), SIGKILLs every child of it and then it, and waits until they are gone.
  void crash_primary();
  /// Promotes the standby (pg_ctl promote) and waits until it takes writes. The nodes
  /// swap roles; the old primary is down until rebuild_standby().
  void promote_standby();
  /// Makes the old primary the new primary's standby: a fresh pg_basebackup into its
  /// directory, started, and waits until it streams.
  void rebuild_standby();

  /// Runs `sql` on the current primary's `database` and returns the first column of
  /// every row (NULL as empty). Throws std::runtime_error on failure.
  std::vector<std::string> query(const std::string& sql) const;

 private:
  struct Node {
    std::string name;
    std::string dir;  // data directory
    int port = 0;
    bool running = false;
  };

  /// Runs a PostgreSQL program as the server user, its output appended to the log.
  void run_tool(const std::string& program, const std::vector<std::string>& args,
                std::chrono::seconds timeout) const;
  void start(Node& node, bool wait);
  void kill_node(Node& node);
  void make_standby_of(Node& standby, const Node& primary);
  void wait_streaming(const Node& standby, std::chrono::seconds timeout) const;
  std::vector<std::string> query_on(const Node& node, const std::string& database,
                                    const std::string& sql) const;
  void write_owned_file(const std::string& path, const std::string& text) const;
  [[noreturn]] void fail(const std::string& what) const;

  PostgresBinaries binaries_;
  ReplicatedPostgresOptions options_;
  std::string dir_;  // the temporary directory: both nodes, their logs, the sockets
  std::string log_;  // the tools' output
  Node nodes_[2];
  int primary_ = 0;  // index into nodes_
  int promotions_ = 0;
};

}  // namespace idem::test
