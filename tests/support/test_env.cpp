#include "support/test_env.hpp"

#include <cstdlib>
#include <string_view>

namespace idem::test {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

bool in_ci() {
  const auto ci = env("CI");
  return ci && (*ci == "true" || *ci == "1");
}

std::optional<std::string> postgres_dsn() {
  return env("IDEM_TEST_PG_DSN");
}

}  // namespace idem::test
