#pragma once
// Claims run ahead on their own thread: while the relay thread produces one batch and
// serves acknowledgements, the next batch is read and turned into messages, so neither
// the claim's round trip nor its rows' conversion is on the relay thread's path. One
// claim at a time: the next one starts after the last id of the previous (the cursor),
// which only its result tells. The relay thread alone decides when to claim and what
// the cursor is, and alone produces, so order is unchanged.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "idem/producer.hpp"
#include "outbox/shared_connection.hpp"
#include "stores/outbox_queries.hpp"

namespace idem::detail {

/// One claim, read and turned into messages by the claim thread.
struct ClaimedBatch {
  std::exception_ptr error;       ///< the claim failed: rethrown on the relay thread
  std::int64_t session = 0;       ///< the database session that ran the claim (kClaimSession)
  std::vector<std::int64_t> ids;  ///< in id order
  std::vector<ProducerMessage> messages;  ///< messages[i] is row ids[i]
  /// When the reader reads positions: the primary's WAL position read in the claim's
  /// transaction, at or past every claimed row's commit (OutboxQueries::claim).
  WalPosition wal;
};

/// Turns claimed rows (columns as ClaimColumn) into messages that carry the rows'
/// own event_ids (born with the events, never new ones) and headers.
void to_messages(const Rows& rows, ClaimedBatch& out);

class ClaimReader {
 public:
  /// Starts the claim thread; claims of up to `batch_size` rows run on `connection`.
  /// `read_wal_position`: each claim also reads its WAL position (ClaimedBatch::wal).
  ClaimReader(SharedConnection& connection, const OutboxQueries& queries, std::size_t batch_size,
              bool read_wal_position = false);
  /// Waits for a claim being read, then joins the thread.
  ~ClaimReader();
  ClaimReader(const ClaimReader&) = delete;
  ClaimReader& operator=(const ClaimReader&) = delete;

  /// Asks for the batch after `after_id` in the shards of `shard_filter`. At most one
  /// claim is outstanding: call only when outstanding() is false.
  void request(std::int64_t after_id, std::string shard_filter);
  /// True from request() until the result is taken or discarded.
  [[nodiscard]] bool outstanding() const noexcept { return outstanding_; }
  /// The outstanding claim's result; nullopt while it is not there yet.
  [[nodiscard]] std::optional<ClaimedBatch> take();
  /// Waits up to `timeout` for the outstanding claim's result (take() then has it).
  void wait(std::chrono::milliseconds timeout);
  /// Waits for the outstanding claim, if any, and drops its rows: nothing of them was
  /// sent, and they are claimed again later. Gives up at `until` (a stop's deadline: the
  /// database may not answer any more) and returns false; the claim then stays
  /// outstanding and its thread busy.
  bool discard(std::chrono::steady_clock::time_point until =
                   std::chrono::steady_clock::time_point::max()) noexcept;

 private:
  struct Request {
    std::int64_t after_id = 0;
    std::string shard_filter;
  };

  void run() noexcept;
  void read(const Request& request, ClaimedBatch& out);

  SharedConnection& connection_;
  const OutboxQueries& queries_;
  const std::size_t batch_size_;
  const bool read_wal_position_;
  bool outstanding_ = false;  // relay thread only

  std::mutex mutex_;
  std::condition_variable requested_;   // claim thread: a request or quit
  std::condition_variable done_;        // relay thread: the result is there
  std::optional<Request> request_;      // guarded by mutex_
  std::optional<ClaimedBatch> result_;  // guarded by mutex_
  bool quit_ = false;                   // guarded by mutex_
  std::thread thread_;                  // last: starts once everything above exists
};

}  // namespace idem::detail
