#pragma once
// The relay's PostgreSQL half (see stores/outbox_queries.hpp): its statements, the
// LISTEN connection, and shard ownership by session-level advisory locks.
#include <memory>

#include "stores/outbox_queries.hpp"

namespace idem::detail::pg {

[[nodiscard]] const OutboxQueries& outbox_queries();

/// Shard ownership by advisory locks on `claim_store`'s session (pg_shard_claimer.cpp).
[[nodiscard]] std::unique_ptr<ShardClaimer> make_shard_claimer(Store& claim_store);

}  // namespace idem::detail::pg
