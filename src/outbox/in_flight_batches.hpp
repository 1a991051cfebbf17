#pragma once
// The batches handed to the producer and not yet marked, in id order: which of them
// the broker acknowledged, and which failed. Only a prefix of fully acknowledged
// batches is ever taken for marking, so no row is marked before every earlier row of
// this relay was acknowledged. Relay thread only.
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
  /// Counts acknowledgements and failures against their batches.
  void apply(std::span<const Delivery> deliveries);
  /// Removes the fully acknowledged batches at the front and returns them as one job
  /// (batches = 0 when the front batch is not fully acknowledged).
  [[nodiscard]] MarkJob take_acknowledged();
  /// The error of the front batch when one of its rows failed (it blocks the pipeline).
  [[nodiscard]] const std::string* front_failure() const noexcept;
  /// Drops every batch; returns how many rows they held (they are sent again).
  std::size_t clear() noexcept;

  [[nodiscard]] bool empty() const noexcept { return batches_.empty(); }
  [[nodiscard]] std::size_t size() const noexcept { return batches_.size(); }

 private:
  struct Batch {
    std::vector<std::int64_t> ids;
    std::uint64_t first_ticket = 0;
    std::size_t acked = 0;
    bool failed = false;
    std::string error;
  };
  std::deque<Batch> batches_;
};

}  // namespace idem::detail
