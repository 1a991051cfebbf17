#pragma once
/// \file
/// RetryPolicy: capped exponential backoff with jitter, shared by the consumer's
/// blocking retries and the HTTP client's attempts; Backoff: its delays.

#include <chrono>
#include <cstdint>
#include <random>

namespace idem {

/// Capped exponential backoff with jitter (a consumer's blocking retry of a
/// partition, an HTTP client's attempts).
/// Attempt n (1-based) waits min(max_backoff, initial_backoff * multiplier^(n-1)),
/// then scaled by a uniform random factor in [1 - jitter, 1 + jitter] (and capped again).
struct RetryPolicy {
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{10000};
  double multiplier = 2.0;
  double jitter = 0.2;  ///< 0 to 1
};

/// The delays of a RetryPolicy, cppkafka BackoffPerformer's knobs as plain data.
/// Deterministic for a given seed, so tests can pin the sequence. Not thread-safe (its
/// random generator).
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

}  // namespace idem
