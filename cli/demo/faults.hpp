#pragma once
// What the demo injects beyond kills and provider faults: a producer resend, malformed
// messages of every kind the boundary rejects, and the `idem dlq replay` run that sends declined
// charges back once their cause is fixed.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "demo/audit.hpp"
#include "idem/store.hpp"

namespace idem::cli::demo {

/// Messages that can never be valid, one per kind the boundary must reject, each with
/// the DLQ error class the consumers must give it.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> malformed_messages();

/// Produces malformed_messages() to the run's topic and waits for the broker's
/// acknowledgement; counts them per class in `injected`. Returns how many were sent.
std::size_t produce_malformed(const RunScope& scope, Injected& injected);

/// A producer resend: a random range of `share` of the run's `events` published outbox
/// rows becomes unpublished again, as if the relay had lost its marks, so the relay
/// sends the same events (same event_id) once more. Returns how many rows.
std::int64_t resend_outbox_rows(Store& store, const RunScope& scope, std::int64_t events,
                                double share, std::mt19937_64& rng);

/// Runs `idem dlq replay` of the billing group's dead letters (reason
/// handler.dead_letter) as a child process; returns how many it replayed.
std::int64_t run_dlq_replay(const RunScope& scope, const std::filesystem::path& log);

}  // namespace idem::cli::demo
