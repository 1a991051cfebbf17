#include "outbox/markers.hpp"

#include <exception>
#include <iterator>
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

namespace {

MarkResult result_of(MarkJob& job) {
  MarkResult r;
  r.rows = job.ids.size();
  r.batches = job.batches;
  r.rejected = std::move(job.rejected);
  return r;
}

}  // namespace

void Markers::mark(Store& store, const MarkJob& job, std::string& list) const {
  // Rejections first, in a transaction of their own: they are rare, and a crash between
  // the two only means that the acknowledged rows are sent again.
  if (!job.rejected.empty()) queries_.mark_rejected(store, job.rejected);
  if (!job.ids.empty()) queries_.mark_published(store, job.ids, ids_per_statement_, list);
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
      MarkJob& next = queue_.front();
      job.ids.insert(job.ids.end(), next.ids.begin(), next.ids.end());
      job.rejected.insert(job.rejected.end(), std::make_move_iterator(next.rejected.begin()),
                          std::make_move_iterator(next.rejected.end()));
      job.batches += next.batches;
      queue_.pop_front();
    }
    ++running_;
    lock.unlock();
    MarkResult r;
    r.batches = job.batches;
    try {
      mark(store, job, list);
      r = result_of(job);
    } catch (...) {
      r.ok = false;
      r.error = std::current_exception();  // the store reconnects by itself on its next begin()
    }
    lock.lock();
    --running_;
    results_.push_back(std::move(r));
    finished_.notify_all();
  }
}

void Markers::submit(MarkJob job) {
  if (threads_.empty()) {
    shared_.with(
        [&](Store& store) { mark(store, job, scratch_); });  // throws: the caller's error path
    MarkResult r = result_of(job);
    pending_ += r.batches;
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

std::vector<MarkResult> Markers::collect(bool all, std::chrono::steady_clock::time_point until) {
  std::vector<MarkResult> results;
  {
    std::unique_lock lock(mutex_);
    const auto idle = [&] { return queue_.empty() && running_ == 0; };
    if (all && until == std::chrono::steady_clock::time_point::max()) {
      finished_.wait(lock, idle);
    } else if (all) {
      static_cast<void>(finished_.wait_until(lock, until, idle));
    }
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
