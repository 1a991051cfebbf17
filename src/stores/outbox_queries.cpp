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

OutboxLag read_lag(Store& store, std::string_view lag_sql) {
  auto tx = store.begin_read();
  const Rows r = tx->execute(lag_sql);
  tx->commit();
  OutboxLag lag;
  lag.backlog = r[0].int64(0);
  const std::int64_t age = r[0].int64(1);
  if (age >= 0) lag.oldest_unpublished_age = std::chrono::milliseconds(age);
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
