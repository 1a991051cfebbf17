#pragma once
// The tests' one way to wait for a condition and to name things uniquely.
#include <chrono>
#include <string>
#include <string_view>
#include <thread>

namespace idem::test {

/// Checks `condition` every `interval` until it holds or `timeout` passes; returns its
/// last value. Polling a condition under a deadline, not a sleep standing in for
/// synchronisation (a costly check, e.g. a database query, may poll less often).
template <class Condition>
[[nodiscard]] bool eventually(Condition condition,
                              std::chrono::milliseconds timeout = std::chrono::seconds(30),
                              std::chrono::milliseconds interval = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(interval);
  }
  return condition();
}

/// `prefix-<random hex>`: a topic, group or table name no other test run uses.
[[nodiscard]] std::string unique_name(std::string_view prefix);

}  // namespace idem::test
