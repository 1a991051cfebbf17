#pragma once
// Marking runs on its own threads and connections, so that the claim -> produce -> ack
// pipeline keeps going while the previous acknowledged batches are being marked:
// throughput is bounded by the slowest of claims, broker and marks, not by their sum.
// With several connections several markers run at once, each taking whatever is queued
// (by default two: on a durable PostgreSQL a mark spends most of its time waiting for
// its commit's WAL flush, and a second marker fills that wait; only with fsync off did
// the contention of two on the same heap and index pages cost more than it gained). Only
// acknowledged batches at the front of the pipeline (a prefix, in id order) are ever handed over,
// so a row is never marked before every earlier row of this relay was acknowledged; in which order
// the markers then commit does not matter (a crash before a mark only means those rows are sent
// again). Without a connection of their own (sqlite://:memory:, or mark_connections = 0) marks run
// inline, on the relay's shared connection.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "outbox/shared_connection.hpp"
#include "stores/outbox_queries.hpp"

namespace idem::detail {

/// A group of settled batches handed to the markers: rows the broker acknowledged, to
/// mark published, and rows refused for good, to set aside as rejected.
struct MarkJob {
  std::vector<std::int64_t> ids;
  std::vector<RejectedRow> rejected;
  std::size_t batches = 0;
};

/// What a marker did with a job.
struct MarkResult {
  std::size_t rows = 0;               ///< marked published
  std::vector<RejectedRow> rejected;  ///< set aside (when ok)
  std::size_t batches = 0;
  bool ok = true;
  std::exception_ptr error;  ///< what the failed mark threw (null when ok)
};

class Markers {
 public:
  /// One marker thread per store of `connections`; none: marks run inline on `shared`.
  /// A mark writes one statement per `ids_per_statement` ids.
  Markers(std::vector<std::unique_ptr<Store>> connections, SharedConnection& shared,
          const OutboxQueries& queries, std::size_t ids_per_statement);
  /// Lets the markers finish what is queued, then joins them (so it waits for a
  /// database that does not answer: see Relay::~Relay for how a stop avoids that).
  ~Markers();
  Markers(const Markers&) = delete;
  Markers& operator=(const Markers&) = delete;

  /// Hands a job over (relay thread). Inline, it is marked here: a failure throws and
  /// the job counts as never handed over.
  void submit(MarkJob job);
  /// Takes the results the markers have; with `all`, first waits until every job
  /// handed over is finished, or until `until` (a stop's deadline: the database may not
  /// answer any more; pending() then stays above zero). Results of failed marks have
  /// ok = false (their rows stay unpublished; a marker's store reconnects by itself on
  /// its next begin()).
  [[nodiscard]] std::vector<MarkResult> collect(
      bool all,
      std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());
  /// Waits up to `timeout` for a result to collect.
  void wait(std::chrono::milliseconds timeout);
  /// Batches handed over whose results were not collected yet.
  [[nodiscard]] std::size_t pending() const noexcept { return pending_; }
  /// Forgets the pending count (after a collect that could not complete).
  void forget_pending() noexcept { pending_ = 0; }

 private:
  void run(Store& store) noexcept;
  void mark(Store& store, const MarkJob& job, std::string& list) const;

  SharedConnection& shared_;
  const OutboxQueries& queries_;
  const std::size_t ids_per_statement_;
  std::vector<std::unique_ptr<Store>> connections_;
  std::string scratch_;      // inline marks' id list (relay thread)
  std::size_t pending_ = 0;  // relay thread

  std::mutex mutex_;
  std::condition_variable work_;      // markers: work or quit
  std::condition_variable finished_;  // relay thread: a job finished
  std::deque<MarkJob> queue_;         // guarded by mutex_
  std::vector<MarkResult> results_;   // guarded by mutex_
  std::size_t running_ = 0;           // guarded by mutex_
  bool quit_ = false;                 // guarded by mutex_
  std::vector<std::thread> threads_;  // last: started once everything above exists
};

}  // namespace idem::detail
