#include "stores/outbox_queries.hpp"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "stores/postgres/pg_outbox.hpp"
#include "stores/sqlite/sqlite_outbox.hpp"

namespace idem::detail {

const OutboxQueries& outbox_queries(const Store& store) {
  switch (store.backend()) {
    case Backend::Postgres: return pg::outbox_queries();
    case Backend::Sqlite: return sqlite::outbox_queries();
  }
  return sqlite::outbox_queries();  // unreachable: every Backend is handled above
}

void mark_ids_in_chunks(Store& store, std::string_view mark_sql, std::span<const std::int64_t> ids,
                        std::size_t ids_per_statement, char open, char close, std::string& list) {
  auto tx = store.begin();
  for (std::size_t from = 0; from < ids.size(); from += ids_per_statement) {
    const std::size_t to = std::min(ids.size(), from + ids_per_statement);
    list.clear();
    list.reserve((to - from) * 8 + 2);
    list.push_back(open);
    for (std::size_t i = from; i < to; ++i) {
      if (i > from) list.push_back(',');
      fmt::format_to(std::back_inserter(list), "{}", ids[i]);
    }
    list.push_back(close);
    tx->execute_deferred(mark_sql, list);
  }
  tx->commit();
}

void reject_rows(Store& store, std::string_view reject_sql, std::span<const RejectedRow> rows) {
  auto tx = store.begin();
  for (const RejectedRow& row : rows) tx->execute(reject_sql, row.id, row.reason);
  tx->commit();
}

Rows read_rejected_rows(Store& store, std::string_view list_sql, std::int64_t limit) {
  auto tx = store.begin_read();
  Rows rows = tx->execute(list_sql, limit);
  tx->commit();
  return rows;
}

bool requeue_rejected_row(Store& store, std::int64_t id) {
  auto tx = store.begin();
  const Rows r = tx->execute(
      "UPDATE idem_outbox SET rejected_at = NULL, rejected_reason = NULL "
      "WHERE id = $1 AND rejected_at IS NOT NULL AND published_at IS NULL",
      id);
  tx->commit();
  return r.affected() == 1;
}

OutboxLag read_lag(Store& store, std::string_view lag_sql) {
  auto tx = store.begin_read();
  const Rows r = tx->execute(lag_sql);
  tx->commit();
  OutboxLag lag;
  lag.backlog = r[0].int64(0);
  const std::int64_t age = r[0].int64(1);
  if (age >= 0) lag.oldest_unpublished_age = std::chrono::milliseconds(age);
  lag.rejected = r[0].int64(2);
  return lag;
}

std::int64_t delete_published_rows(Store& store, std::string_view delete_sql,
                                   std::chrono::milliseconds older_than, std::int64_t limit) {
  auto tx = store.begin();
  const Rows r = tx->execute(delete_sql, static_cast<std::int64_t>(older_than.count()), limit);
  tx->commit();
  return r.affected();
}

}  // namespace idem::detail

namespace idem {

OutboxLag outbox_lag(Store& store) {
  return detail::outbox_queries(store).lag(store);
}

}  // namespace idem
