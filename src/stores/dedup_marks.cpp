#include "stores/dedup_marks.hpp"

namespace idem::detail {

void unmark_processed(Transaction& tx, const Uuid& event_id, std::string_view consumer_group) {
  tx.execute("DELETE FROM processed_event WHERE event_id = $1 AND consumer_group = $2", event_id,
             consumer_group);
}

}  // namespace idem::detail
