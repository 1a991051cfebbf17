#pragma once
// The batches handed to the producer and not yet marked, in id order: which of their
// rows the broker acknowledged, which were refused for good (to be set aside as
// rejected), and which failed transiently. Only a prefix of settled batches (every row
// acknowledged or refused for good) is ever taken for marking, so no row is marked
// before every earlier row of this relay was settled. Relay thread only.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "idem/producer.hpp"
#include "outbox/markers.hpp"

namespace idem::detail {

class InFlightBatches {
 public:
  /// A batch whose rows `ids` (in id order) were sent with consecutive tickets from
  /// `first_ticket`.
  void push(std::vector<std::int64_t> ids, std::uint64_t first_ticket);
  /// Counts acknowledgements and failures against their batches: a permanent failure
  /// makes its row rejected (with the delivery's reason), a transient one fails the
  /// batch.
  void apply(std::span<const Delivery> deliveries);
  /// Removes the settled batches at the front and returns them as one job: the
  /// acknowledged rows to mark published, the refused ones to set aside (batches = 0
  /// when the front batch is not settled).
  [[nodiscard]] MarkJob take_settled();
  /// The error of the front batch when one of its rows failed transiently (it blocks
  /// the pipeline: the relay sends again from the oldest unpublished row).
  [[nodiscard]] const std::string* front_failure() const noexcept;
  /// Rows of every batch (produced, not yet marked).
  [[nodiscard]] std::size_t rows() const noexcept;
  /// Drops every batch; returns how many rows they held (they are sent again).
  std::size_t clear() noexcept;

  [[nodiscard]] bool empty() const noexcept { return batches_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return batches_.size(); }

 private:
  struct Batch {
    std::vector<std::int64_t> ids;
    std::uint64_t first_ticket = 0;
    std::size_t acked = 0;
    std::vector<RejectedRow> rejected;  // refused for good: settled, not published
    bool failed = false;
    std::string error;
  };
  std::deque<Batch> batches_;
};

}  // namespace idem::detail
