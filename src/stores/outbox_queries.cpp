#include "stores/outbox_queries.hpp"

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

}  // namespace idem::detail
