#pragma once
// How an idle relay waits for work: for a notification from the backend (PostgreSQL
// LISTEN idem_outbox; inserting an outbox row NOTIFYs) or just for the poll interval.
// The notification is only a wake-up hint: polling stays the correctness path, so a
// listener that cannot be opened or breaks only costs latency.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "idem/store.hpp"
#include "stores/outbox_queries.hpp"

namespace idem::detail {

class IdleWait {
 public:
  /// `listen`: whether to use notifications at all. Opens the listener now.
  IdleWait(const OutboxQueries& queries, std::string url, StoreOptions options, bool listen,
           std::function<void(std::string_view)> log);

  /// Opens the listener again if it was lost (or could not be opened before).
  void reopen_if_lost() noexcept;
  /// Replaces the listener with a new one (after a failover its connection may be to a
  /// server that no longer takes the inserts, and still look alive).
  void reopen() noexcept;
  /// Waits up to `timeout` for a notification (or for the timeout without a listener), in
  /// slices short enough to notice `stop`.
  void wait(std::chrono::milliseconds timeout, const std::atomic<bool>& stop);

 private:
  void open() noexcept;
  void log(std::string_view line) const {
    if (log_) log_(line);
  }

  const OutboxQueries& queries_;
  const std::string url_;
  const StoreOptions options_;
  const bool listen_;
  std::function<void(std::string_view)> log_;
  std::unique_ptr<OutboxListener> listener_;  // nullptr: poll only
};

}  // namespace idem::detail
