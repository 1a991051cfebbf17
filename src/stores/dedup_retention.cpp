#include "stores/dedup_retention.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "stores/store_errors.hpp"

namespace idem::detail {

namespace {

using Millis = std::chrono::sys_time<std::chrono::milliseconds>;
using std::chrono::milliseconds;

std::int64_t unix_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}
Millis from_unix_ms(std::int64_t ms) {
  return Millis(milliseconds(ms));
}

/// Refuses a store migrated by an idem that did not record retention: without the
/// declarations a pass would drop what consumers rely on, and a consumer could not
/// learn what was dropped.
void require_tables(Store& store, Transaction& tx) {
  require_table(store, tx, "idem_dedup_marks_dropped",
                "the store does not record its dedup retention (no idem_dedup_retention "
                "table: it was migrated by an older idem); run `idem migrate` first");
}

/// Reads (and on PostgreSQL locks) the one row of idem_dedup_marks_dropped. Both a
/// declaration and a pass take this lock first, so they run one after the other; on
/// SQLite begin() already holds the database's write lock.
DroppedDedupMarks lock_dropped_marks(Store& store, Transaction& tx) {
  require_tables(store, tx);
  const Rows rows = tx.execute(
      store.backend() == Backend::Postgres
          ? "SELECT born_before_ms, dropped_at_ms, retention_ms FROM idem_dedup_marks_dropped "
            "WHERE id = 1 FOR UPDATE"
          : "SELECT born_before_ms, dropped_at_ms, retention_ms FROM idem_dedup_marks_dropped "
            "WHERE id = 1");
  DroppedDedupMarks out;
  if (rows.empty()) return out;  // the migration inserts the row; absent only if deleted by hand
  out.born_before = from_unix_ms(rows[0].int64(0));
  out.dropped_at = from_unix_ms(rows[0].int64(1));
  out.retention = milliseconds(rows[0].int64(2));
  return out;
}

std::vector<DedupRetentionDeclaration> read_declarations(Transaction& tx) {
  std::vector<DedupRetentionDeclaration> out;
  for (const RowView row :
       tx.execute("SELECT consumer_group, retention_ms, declared_by, renewed_at_ms FROM "
                  "idem_dedup_retention ORDER BY consumer_group, retention_ms")) {
    out.push_back({std::string(row.text(0)), milliseconds(row.int64(1)), std::string(row.text(2)),
                   from_unix_ms(row.int64(3))});
  }
  return out;
}

}  // namespace

DroppedDedupMarks declare_dedup_retention(Store& store, std::string_view consumer_group,
                                          milliseconds retention, std::string_view declared_by,
                                          std::chrono::system_clock::time_point now) {
  auto tx = store.begin();
  const DroppedDedupMarks dropped = lock_dropped_marks(store, *tx);
  tx->execute(
      "INSERT INTO idem_dedup_retention (consumer_group, retention_ms, declared_by, "
      "renewed_at_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (consumer_group, retention_ms) DO "
      "UPDATE SET declared_by = excluded.declared_by, renewed_at_ms = excluded.renewed_at_ms",
      consumer_group, static_cast<std::int64_t>(retention.count()), declared_by, unix_ms(now));
  tx->commit();
  return dropped;
}

SettledDedupRetention settle_dedup_retention(Store& store, milliseconds configured,
                                             std::chrono::system_clock::time_point now) {
  auto tx = store.begin();
  const DroppedDedupMarks dropped = lock_dropped_marks(store, *tx);
  SettledDedupRetention out;
  out.kept = configured;
  const Millis now_ms = std::chrono::floor<milliseconds>(now);
  for (DedupRetentionDeclaration& d : read_declarations(*tx)) {
    if (d.expires_at() <= now_ms) {
      out.expired.push_back(std::move(d));
    } else if (d.retention > configured) {
      out.kept = std::max(out.kept, d.retention);
      out.held_by.push_back(std::move(d));
    }
  }
  // Only marks that exist can be lost: a pass over a store with nothing that old records
  // nothing, so a group starting on a young store processes its backlog as usual.
  const Millis born_before = now_ms - out.kept;
  if (born_before > dropped.born_before &&
      !tx->execute("SELECT 1 FROM processed_event WHERE event_id < $1 LIMIT 1",
                   Uuid::lower_bound_for(born_before))
           .empty()) {
    tx->execute(
        "UPDATE idem_dedup_marks_dropped SET born_before_ms = $1, dropped_at_ms = $2, "
        "retention_ms = $3 WHERE id = 1",
        born_before.time_since_epoch().count(), now_ms.time_since_epoch().count(),
        static_cast<std::int64_t>(out.kept.count()));
  }
  tx->commit();
  return out;
}

}  // namespace idem::detail

namespace idem {

std::vector<DedupRetentionDeclaration> dedup_retention_declarations(Store& store) {
  auto tx = store.begin_read();
  detail::require_tables(store, *tx);
  auto out = detail::read_declarations(*tx);
  tx->commit();
  return out;
}

DroppedDedupMarks dropped_dedup_marks(Store& store) {
  auto tx = store.begin();
  const DroppedDedupMarks out = detail::lock_dropped_marks(store, *tx);
  tx->commit();
  return out;
}

std::int64_t forget_dedup_retention(Store& store, std::string_view consumer_group) {
  auto tx = store.begin();
  detail::require_tables(store, *tx);
  const std::int64_t removed =
      tx->execute("DELETE FROM idem_dedup_retention WHERE consumer_group = $1", consumer_group)
          .affected();
  tx->commit();
  return removed;
}

}  // namespace idem
