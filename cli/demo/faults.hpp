#pragma once
// What the demo injects beyond kills and provider faults: malformed messages of every
// kind the boundary rejects, and the `idem dlq replay` run that sends declined charges
// back once their cause is fixed.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "demo/audit.hpp"

namespace idem::cli::demo {

/// Messages that can never be valid, one per kind the boundary must reject, each with
/// the DLQ error class the consumers must give it.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> malformed_messages();

/// Produces malformed_messages() to the run's topic and waits for the broker's
/// acknowledgement; counts them per class in `injected`. Returns how many were sent.
std::size_t produce_malformed(const RunScope& scope, Injected& injected);

/// Runs `idem dlq replay` of the billing group's dead letters (reason
/// handler.dead_letter) as a child process; returns how many it replayed.
std::int64_t run_dlq_replay(const RunScope& scope, const std::filesystem::path& log);

}  // namespace idem::cli::demo
