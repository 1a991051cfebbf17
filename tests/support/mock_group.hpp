#pragma once
// The consumer-group timing of every test consumer on the dev broker (librdkafka 2.0.2's
// mock cluster, docs/dev-broker.md). Its first join waits a fixed 3 s, so
// session.timeout.ms must be above that; every later rebalance (a member joins again, a
// killed member is given up) waits about session.timeout.ms - 1 s. librdkafka's default
// session timeout, 45 s, would make each restart in a group wait 44 s, so no test consumer
// is left with it: in-process consumers take mock_group_properties(), `idem consume` and
// the consumer child take mock_group_flags().
#include <string>
#include <utility>
#include <vector>

namespace idem::test {

/// session.timeout.ms of test consumers: as short as the mock allows (above its 3 s first
/// join, as the demo's), since every restart in a group waits for it. Heartbeats go every
/// second, so a live member is given up only after it missed several of them.
inline constexpr const char* kMockSessionTimeoutMs = "4000";

/// librdkafka properties of a test consumer: the session timeout above, heartbeats every
/// second, and only errors in the log.
inline std::vector<std::pair<std::string, std::string>> mock_group_properties() {
  return {{"session.timeout.ms", kMockSessionTimeoutMs},
          {"heartbeat.interval.ms", "1000"},
          {"log_level", "3"}};
}

/// The same properties as command-line flags: `--kafka key=value` each.
inline std::vector<std::string> mock_group_flags() {
  std::vector<std::string> flags;
  for (const auto& [key, value] : mock_group_properties()) {
    flags.emplace_back("--kafka");
    flags.push_back(key + "=" + value);
  }
  return flags;
}

/// `args` (of `idem consume` or the consumer child) followed by mock_group_flags().
inline std::vector<std::string> with_mock_group(std::vector<std::string> args) {
  for (auto& flag : mock_group_flags()) args.push_back(std::move(flag));
  return args;
}

}  // namespace idem::test
