#pragma once
// Load for failover tests: orders created and confirmed through the reference order
// service (the order, its confirmation and the outbox row in one transaction) at a
// steady rate, on a thread of its own, across failovers. It records which commits were
// acknowledged, and when, so that a test can tell which of them a failover took back.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "idem/uuid.hpp"

namespace idem::test {

class OrderWriter {
 public:
  using Clock = std::chrono::steady_clock;

  /// An order whose confirming transaction's COMMIT was acknowledged.
  struct Order {
    std::int64_t id = 0;
    Uuid event_id;
    Clock::time_point committed_at;
  };

  /// Starts writing orders `first_id`, `first_id` + 1, ... to the store at `url`, about
  /// `per_second` a second. Ids are never reused, also not after a failover took an
  /// order back. A transient error (the primary is gone, nothing is promoted yet) is
  /// retried with the next id after a short pause; a COMMIT in doubt counts in in_doubt().
  OrderWriter(std::string url, double per_second, std::int64_t first_id = 1);
  /// stop()
  ~OrderWriter();
  OrderWriter(const OrderWriter&) = delete;
  OrderWriter& operator=(const OrderWriter&) = delete;

  /// Stops writing and joins the thread. Idempotent.
  void stop();

  /// The acknowledged orders from index `from` on, in commit order.
  [[nodiscard]] std::vector<Order> acknowledged(std::size_t from = 0) const;
  [[nodiscard]] std::size_t acknowledged_count() const;
  /// When the last acknowledged commit returned; nullopt before the first.
  [[nodiscard]] std::optional<Clock::time_point> last_acknowledged_at() const;
  /// Confirmations whose COMMIT broke off without an answer (committed or not).
  [[nodiscard]] std::size_t in_doubt() const;
  /// The last error that stopped an order, for a test's message ("" when none).
  [[nodiscard]] std::string last_error() const;

 private:
  void run() noexcept;

  const std::string url_;
  const Clock::duration interval_;
  std::int64_t next_id_;  // writer thread only

  mutable std::mutex mutex_;
  std::condition_variable stop_requested_;
  bool stop_ = false;
  std::vector<Order> acknowledged_;
  std::size_t in_doubt_ = 0;
  std::string last_error_;
  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace idem::test
