#include "consumer/steady_clock.hpp"

namespace idem::detail {

namespace {

class RealSteadyClock final : public SteadyClock {
 public:
  [[nodiscard]] TimePoint now() const noexcept override { return std::chrono::steady_clock::now(); }
};

}  // namespace

const SteadyClock& SteadyClock::real() noexcept {
  static const RealSteadyClock clock;
  return clock;
}

}  // namespace idem::detail
