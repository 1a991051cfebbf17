#pragma once
// The store's record of one dedup retention (idem_dedup_retention and
// idem_dedup_marks_dropped, docs/retention.md): consumers declare what their horizon
// relies on and learn what maintenance dropped; maintenance settles what it keeps from
// the declarations and records what it is about to drop. The SQL is the same on both
// backends except the row lock that orders a declaration against a pass.
#include <chrono>
#include <string_view>
#include <vector>

#include "idem/retention.hpp"
#include "idem/store.hpp"

namespace idem::detail {

/// Upserts `consumer_group`'s declaration of `retention` (renewed at `now`) and reads
/// what maintenance dropped, in one transaction ordered against every maintenance pass:
/// a pass either sees this declaration or has recorded its drop before the read.
/// \throws Error(Schema) when the store was migrated by an idem without these tables.
[[nodiscard]] DroppedDedupMarks declare_dedup_retention(Store& store,
                                                        std::string_view consumer_group,
                                                        std::chrono::milliseconds retention,
                                                        std::string_view declared_by,
                                                        std::chrono::system_clock::time_point now);

/// The retention a maintenance pass keeps, and why.
struct SettledDedupRetention {
  std::chrono::milliseconds kept{0};
  std::vector<DedupRetentionDeclaration> held_by;  ///< live declarations longer than configured
  std::vector<DedupRetentionDeclaration> expired;  ///< ignored: not renewed within their retention
};

/// For a pass at `now` configured to keep `configured`: keeps the longest of it and every
/// live declaration, and, when marks of events born before `now - kept` exist, records
/// that such marks may be gone (before any is deleted, so a crash part-way errs on the
/// safe side), in one transaction. \throws Error(Schema) like declare_dedup_retention.
[[nodiscard]] SettledDedupRetention settle_dedup_retention(
    Store& store, std::chrono::milliseconds configured, std::chrono::system_clock::time_point now);

}  // namespace idem::detail
