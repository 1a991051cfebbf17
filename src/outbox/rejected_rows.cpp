// Rejected outbox rows for operators (`idem outbox rejected`, `idem outbox requeue`):
// the statements are the backend's (OutboxQueries).
#include "idem/outbox.hpp"
#include "stores/outbox_queries.hpp"

namespace idem {

std::vector<RejectedOutboxRow> list_rejected_outbox_rows(Store& store, std::int64_t limit) {
  const Rows rows = detail::outbox_queries(store).list_rejected(store, limit);
  std::vector<RejectedOutboxRow> out;
  out.reserve(rows.size());
  for (const auto row : rows) {
    RejectedOutboxRow r;
    r.id = row.int64(detail::kRejectedId);
    r.event_id = row.uuid(detail::kRejectedEventId);
    r.topic = std::string(row.text(detail::kRejectedTopic));
    r.message_key = std::string(row.text(detail::kRejectedKey));
    r.payload_bytes = row.int64(detail::kRejectedPayloadBytes);
    r.reason = std::string(row.text(detail::kRejectedReason));
    r.rejected_at_ms = row.int64(detail::kRejectedAtMs);
    out.push_back(std::move(r));
  }
  return out;
}

bool requeue_rejected_outbox_row(Store& store, std::int64_t id) {
  return detail::requeue_rejected_row(store, id);
}

}  // namespace idem
