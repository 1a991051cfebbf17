#include "outbox/in_flight_batches.hpp"

#include <algorithm>
#include <iterator>
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
      } else if (d.permanent) {
        // Sending it again would fail again and hold back every later row of its shards:
        // it is set aside instead (docs/outbox.md, "Rows the broker refuses").
        b.rejected.push_back({b.ids[d.ticket - b.first_ticket], d.error});
      } else if (!b.failed) {
        b.failed = true;
        b.error = d.error;
      }
      break;
    }
  }
}

MarkJob InFlightBatches::take_settled() {
  std::size_t ready = 0;
  while (ready < batches_.size() && !batches_[ready].failed &&
         batches_[ready].acked + batches_[ready].rejected.size() == batches_[ready].ids.size()) {
    ++ready;
  }
  MarkJob job;
  job.batches = ready;
  if (ready == 1 && batches_.front().rejected.empty()) {
    job.ids = std::move(batches_.front().ids);
  } else if (ready > 0) {
    std::size_t rows = 0;
    for (std::size_t i = 0; i < ready; ++i) rows += batches_[i].acked;
    job.ids.reserve(rows);
    for (std::size_t i = 0; i < ready; ++i) {
      Batch& b = batches_[i];
      if (b.rejected.empty()) {
        job.ids.insert(job.ids.end(), b.ids.begin(), b.ids.end());
        continue;
      }
      // Rare: a linear look-up per row is cheaper than building a set.
      for (const std::int64_t id : b.ids) {
        const bool refused = std::any_of(b.rejected.begin(), b.rejected.end(),
                                         [id](const RejectedRow& r) { return r.id == id; });
        if (!refused) job.ids.push_back(id);
      }
      job.rejected.insert(job.rejected.end(), std::make_move_iterator(b.rejected.begin()),
                          std::make_move_iterator(b.rejected.end()));
    }
  }
  batches_.erase(batches_.begin(), batches_.begin() + static_cast<std::ptrdiff_t>(ready));
  return job;
}

const std::string* InFlightBatches::front_failure() const noexcept {
  if (batches_.empty() || !batches_.front().failed) return nullptr;
  return &batches_.front().error;
}

std::size_t InFlightBatches::rows() const noexcept {
  std::size_t rows = 0;
  for (const Batch& b : batches_) rows += b.ids.size();
  return rows;
}

std::size_t InFlightBatches::clear() noexcept {
  const std::size_t n = rows();
  batches_.clear();
  return n;
}

}  // namespace idem::detail
