#pragma once
// The console's one store connection, shared by the sampler and the request threads
// (a Store is one connection and not thread-safe: calls take turns). Opened on first use
// and again after a failure, so a console started before its database still comes up.
#include <memory>
#include <mutex>
#include <string>

#include "idem/error.hpp"
#include "idem/store.hpp"

namespace idem::console {

class StoreAccess {
 public:
  StoreAccess(std::string url, StoreOptions options)
      : url_(std::move(url)), options_(std::move(options)) {
    // A console must never hold a consumer up: give up on a busy SQLite quickly.
    options_.busy_timeout = std::min(options_.busy_timeout, std::chrono::milliseconds(2000));
  }

  /// Runs `f(Store&)` on the connection; throws what `f` or opening throws.
  template <class F>
  auto with(F&& f) {
    std::lock_guard lock(mutex_);
    try {
      if (!store_) store_ = open_store(url_, options_);
      return f(*store_);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::Connection || e.code() == ErrorCode::InDoubt) store_.reset();
      throw;
    }
  }

 private:
  std::mutex mutex_;
  std::string url_;
  StoreOptions options_;
  std::unique_ptr<Store> store_;
};

}  // namespace idem::console
