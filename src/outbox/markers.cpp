#include "outbox/markers.hpp"

#include <exception>
#include <utility>

namespace idem::detail {

Markers::Markers(std::vector<std::unique_ptr<Store>> connections, SharedConnection& shared,
                 const OutboxQueries& queries, std::size_t ids_per_statement)
    : shared_(shared),
      queries_(queries),
      ids_per_statement_(ids_per_statement),
      connections_(std::move(connections)) {
  for (const auto& store : connections_) {
    threads_.emplace_back([this, &s = *store] { run(s); });
  }
}

Markers::~Markers() {
  if (threads_.empty()) return;
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void Markers::mark(Store& store, const std::vector<std::int64_t>& ids, std::string& list) const {
  queries_.mark_published(store, ids, ids_per_statement_, list);
}

void Markers::run(Store& store) noexcept {
  std::string list;
  std::unique_lock lock(mutex_);
  while (true) {
    work_.wait(lock, [&] { return quit_ || !queue_.empty(); });
    if (queue_.empty()) return;  // quit, nothing left
    // Everything queued goes into one job: the longer a mark takes, the larger the
    // next one, so marking keeps up with any ack rate.
    MarkJob job = std::move(queue_.front());
    queue_.pop_front();
    while (!queue_.empty()) {
      job.ids.insert(job.ids.end(), queue_.front().ids.begin(), queue_.front().ids.end());
      job.batches += queue_.front().batches;
      queue_.pop_front();
    }
    ++running_;
    lock.unlock();
    MarkResult r;
    r.rows = job.ids.size();
    r.batches = job.batches;
    try {
      mark(store, job.ids, list);
    } catch (const std::exception& e) {
      r.ok = false;
      r.error = e.what();  // the store reconnects by itself on its next begin()
    } catch (...) {
      r.ok = false;
      r.error = "unknown error";
    }
    lock.lock();
    --running_;
    results_.push_back(std::move(r));
    finished_.notify_all();
  }
}

void Markers::submit(MarkJob job) {
  if (threads_.empty()) {
    MarkResult r;
    r.rows = job.ids.size();
    r.batches = job.batches;
    shared_.with(
        [&](Store& store) { mark(store, job.ids, scratch_); });  // throws: the caller's error path
    pending_ += job.batches;
    std::lock_guard lock(mutex_);
    results_.push_back(std::move(r));
    return;
  }
  pending_ += job.batches;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(job));
  }
  work_.notify_one();
}

std::vector<MarkResult> Markers::collect(bool all) {
  std::vector<MarkResult> results;
  {
    std::unique_lock lock(mutex_);
    if (all) finished_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
    results.swap(results_);
  }
  for (const MarkResult& r : results) pending_ -= r.batches;
  return results;
}

void Markers::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  finished_.wait_for(lock, timeout, [&] { return !results_.empty(); });
}

}  // namespace idem::detail
