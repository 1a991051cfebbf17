#include "support/order_writer.hpp"

#include <exception>
#include <memory>

#include "idem/error.hpp"
#include "idem/outbox.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/store.hpp"

namespace idem::test {

OrderWriter::OrderWriter(std::string url, double per_second, std::int64_t first_id)
    : url_(std::move(url)),
      interval_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(1.0 / per_second))),
      next_id_(first_id),
      thread_([this] { run(); }) {}

OrderWriter::~OrderWriter() {
  stop();
}

void OrderWriter::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stop_requested_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void OrderWriter::run() noexcept {
  Outbox outbox;
  OrderService service(outbox);
  std::unique_ptr<Store> store;
  auto next_at = Clock::now();
  while (true) {
    {
      // Pacing the load (a rate, not synchronisation); a stop ends the wait at once.
      std::unique_lock lock(mutex_);
      if (stop_requested_.wait_until(lock, next_at, [&] { return stop_; })) return;
    }
    next_at = std::max(next_at + interval_, Clock::now() - 10 * interval_);
    const std::int64_t id = next_id_++;
    try {
      if (!store) store = open_store(url_);
      auto tx = store->begin();
      service.create(*tx, id, 1 + id % 97, Amount::from_hundredths(100 + id % 10'000));
      const auto confirmation = service.confirm(*tx, id);
      tx->commit();
      std::lock_guard lock(mutex_);
      if (confirmation) acknowledged_.push_back({id, confirmation->event_id, Clock::now()});
    } catch (const Error& e) {
      std::lock_guard lock(mutex_);
      last_error_ = e.what();
      if (e.code() == ErrorCode::InDoubt) ++in_doubt_;
      // No primary yet (connecting failed) or the connection broke: the next order goes
      // to whichever server takes writes then, a moment later.
      next_at = Clock::now() + std::chrono::milliseconds(50);
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      last_error_ = e.what();
      next_at = Clock::now() + std::chrono::milliseconds(50);
    }
  }
}

std::vector<OrderWriter::Order> OrderWriter::acknowledged(std::size_t from) const {
  std::lock_guard lock(mutex_);
  if (from >= acknowledged_.size()) return {};
  return {acknowledged_.begin() + static_cast<std::ptrdiff_t>(from), acknowledged_.end()};
}

std::size_t OrderWriter::acknowledged_count() const {
  std::lock_guard lock(mutex_);
  return acknowledged_.size();
}

std::optional<OrderWriter::Clock::time_point> OrderWriter::last_acknowledged_at() const {
  std::lock_guard lock(mutex_);
  if (acknowledged_.empty()) return std::nullopt;
  return acknowledged_.back().committed_at;
}

std::size_t OrderWriter::in_doubt() const {
  std::lock_guard lock(mutex_);
  return in_doubt_;
}

std::string OrderWriter::last_error() const {
  std::lock_guard lock(mutex_);
  return last_error_;
}

}  // namespace idem::test
