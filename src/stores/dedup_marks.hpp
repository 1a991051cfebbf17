#pragma once
// Dedup-mark statements beyond the Transaction interface's own marks.
//
// unmark_processed is a free function rather than a Transaction method only to keep
// this change apart from concurrent work on Transaction; its statement is the same on
// every backend (a Uuid binds as each backend stores it).
#include <string_view>

#include "idem/store.hpp"

namespace idem::detail {

/// Removes the dedup mark of `event_id` for `consumer_group` inside `tx`, so that an
/// event dead-lettered (or to be retried) is processed, not skipped as a duplicate, when
/// it comes back. Part of `tx`: rolls back with it. Throws idem::Error like execute().
void unmark_processed(Transaction& tx, const Uuid& event_id, std::string_view consumer_group);

}  // namespace idem::detail
