#include "consumer/batch/background_commit.hpp"

#include <utility>

namespace idem::detail {

BackgroundCommit::BackgroundCommit(std::function<void()> wake)
    : wake_(std::move(wake)), thread_([this] { main(); }) {}

BackgroundCommit::~BackgroundCommit() {
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();  // the thread finishes the job in flight first
}

void BackgroundCommit::start(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    job_ = std::move(job);
  }
  cv_.notify_all();
}

void BackgroundCommit::wait() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !job_; });
  done_.store(false);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void BackgroundCommit::wait_quietly() noexcept {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return !job_; });
  done_.store(false);
  error_ = nullptr;
}

void BackgroundCommit::main() {
  std::unique_lock lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || job_; });
    if (!job_) return;  // quit, nothing left to commit
    std::function<void()> job = job_;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();  // the run() thread rethrows it from wait()
    }
    lock.lock();
    error_ = error;
    job_ = nullptr;
    done_.store(true);
    cv_.notify_all();
    if (wake_) wake_();
  }
}

}  // namespace idem::detail
