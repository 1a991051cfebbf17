#include "support/wait.hpp"

#include <mutex>
#include <random>

#include <fmt/format.h>

namespace idem::test {

std::string unique_name(std::string_view prefix) {
  static std::mutex mutex;
  static std::mt19937_64 rng{std::random_device{}()};
  const std::lock_guard lock(mutex);
  return fmt::format("{}-{:012x}", prefix, rng() & 0xffffffffffffULL);
}

}  // namespace idem::test
