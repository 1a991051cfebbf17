#pragma once
// The relay's SQLite half (see stores/outbox_queries.hpp): its statements and the
// single-relay file lock.
#include <memory>
#include <string>

#include "stores/outbox_queries.hpp"

namespace idem::detail::sqlite {

[[nodiscard]] const OutboxQueries& outbox_queries();

/// One relay at a time, by an exclusive flock on `lock_path` (empty: no lock, for
/// :memory:, which is private to one connection anyway) (sqlite_shard_claimer.cpp).
[[nodiscard]] std::unique_ptr<ShardClaimer> make_shard_claimer(std::string lock_path);

}  // namespace idem::detail::sqlite
