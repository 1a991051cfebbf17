#include "outbox/in_flight_batches.hpp"

#include <utility>

namespace idem::detail {

void InFlightBatches::push(std::vector<std::int64_t> ids, std::uint64_t first_ticket) {
  Batch b;
  b.ids = std::move(ids);
  b.first_ticket = first_ticket;
  batches_.push_back(std::move(b));
}

void InFlightBatches::apply(std::span<const Delivery> deliveries) {
  for (const Delivery& d : deliveries) {
    for (Batch& b : batches_) {
      if (d.ticket < b.first_ticket || d.ticket >= b.first_ticket + b.ids.size()) continue;
      if (d.ok) {
        ++b.acked;
      } else if (!b.failed) {
        b.failed = true;
        b.error = d.error;
      }
      break;
    }
  }
}

MarkJob InFlightBatches::take_acknowledged() {
  std::size_t ready = 0;
  while (ready < batches_.size() && !batches_[ready].failed &&
         batches_[ready].acked == batches_[ready].ids.size()) {
    ++ready;
  }
  MarkJob job;
  job.batches = ready;
  if (ready == 1) {
    job.ids = std::move(batches_.front().ids);
  } else if (ready > 1) {
    std::size_t rows = 0;
    for (std::size_t i = 0; i < ready; ++i) rows += batches_[i].ids.size();
    job.ids.reserve(rows);
    for (std::size_t i = 0; i < ready; ++i) {
      job.ids.insert(job.ids.end(), batches_[i].ids.begin(), batches_[i].ids.end());
    }
  }
  batches_.erase(batches_.begin(), batches_.begin() + static_cast<std::ptrdiff_t>(ready));
  return job;
}

const std::string* InFlightBatches::front_failure() const noexcept {
  if (batches_.empty() || !batches_.front().failed) return nullptr;
  return &batches_.front().error;
}

std::size_t InFlightBatches::clear() noexcept {
  std::size_t rows = 0;
  for (const Batch& b : batches_) rows += b.ids.size();
  batches_.clear();
  return rows;
}

}  // namespace idem::detail
