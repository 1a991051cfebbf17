#pragma once
// Capped exponential backoff with jitter (RetryPolicy), cppkafka BackoffPerformer's knobs
// as plain data. Deterministic for a given seed, so tests can pin the sequence.
#include <chrono>
#include <cstdint>
#include <random>

#include "idem/consumer.hpp"

namespace idem::detail {

class Backoff {
 public:
  /// \throws Error(InvalidArgument, Config) for a policy that cannot work
  ///   (non-positive durations, max < initial, multiplier < 1, jitter outside [0, 1]).
  explicit Backoff(const RetryPolicy& policy, std::uint64_t seed = std::random_device{}());

  /// The wait before attempt `attempt + 1`, after `attempt` (>= 1) failures.
  [[nodiscard]] std::chrono::milliseconds delay(std::uint32_t attempt);

  /// Throws Error(InvalidArgument, Config) if `policy` is unusable.
  static void validate(const RetryPolicy& policy);

 private:
  RetryPolicy policy_;
  std::mt19937_64 rng_;
};

}  // namespace idem::detail
