#include "idem/retry.hpp"

#include <algorithm>
#include <cmath>

#include "idem/error.hpp"

namespace idem {

void Backoff::validate(const RetryPolicy& policy) {
  const auto bad = [](const char* what) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                std::string("retry policy: ") + what);
  };
  if (policy.initial_backoff.count() <= 0) bad("initial_backoff must be positive");
  if (policy.max_backoff < policy.initial_backoff) bad("max_backoff must be >= initial_backoff");
  if (!(policy.multiplier >= 1.0) || !std::isfinite(policy.multiplier))
    bad("multiplier must be a finite number >= 1");
  if (!(policy.jitter >= 0.0 && policy.jitter <= 1.0)) bad("jitter must be in [0, 1]");
}

Backoff::Backoff(const RetryPolicy& policy, std::uint64_t seed) : policy_(policy), rng_(seed) {
  validate(policy_);
}

std::chrono::milliseconds Backoff::delay(std::uint32_t attempt) {
  const double cap = static_cast<double>(policy_.max_backoff.count());
  const double exponent = static_cast<double>(std::max<std::uint32_t>(attempt, 1) - 1);
  // pow overflows to inf for large attempts; min() with the cap handles that.
  double base = std::min(cap, static_cast<double>(policy_.initial_backoff.count()) *
                                  std::pow(policy_.multiplier, exponent));
  if (policy_.jitter > 0.0) {
    std::uniform_real_distribution<double> factor(1.0 - policy_.jitter, 1.0 + policy_.jitter);
    base = std::min(cap, base * factor(rng_));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::max(1.0, base)));
}

}  // namespace idem
