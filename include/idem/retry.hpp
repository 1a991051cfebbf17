#pragma once
/// \file
/// RetryPolicy: capped exponential backoff with jitter, shared by the consumer's
/// blocking retries and the HTTP client's attempts.

#include <chrono>

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

}  // namespace idem
