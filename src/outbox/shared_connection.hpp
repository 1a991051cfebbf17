#pragma once
// The relay's main connection. Claims (claim thread), shard locks (their session), the
// lag, cleanup and inline marks (relay thread) all run on it; a Store is one connection
// and not thread-safe, so every use goes through with(), one at a time.
#include <memory>
#include <mutex>
#include <utility>

#include "idem/store.hpp"

namespace idem::detail {

class SharedConnection {
 public:
  explicit SharedConnection(std::unique_ptr<Store> store) : store_(std::move(store)) {}

  /// Runs `use(store)` while no other thread uses the store; returns what it returns.
  template <class Use>
  decltype(auto) with(Use&& use) {
    std::lock_guard lock(mutex_);
    return std::forward<Use>(use)(*store_);
  }

  /// The store itself, for objects that keep a reference to it (the shard claimer) and
  /// promise to use it only inside with().
  [[nodiscard]] Store& store() noexcept { return *store_; }

 private:
  std::unique_ptr<Store> store_;
  std::mutex mutex_;
};

}  // namespace idem::detail
