// The core idea of idem in one page: the dedup mark and the effect commit together.
#include <idem/store.hpp>
#include <idem/uuid.hpp>

#include <iostream>
#include <stdexcept>

namespace {

// The business effect of one event: here, add to an account balance.
void apply_effect(idem::Transaction& tx, std::int64_t amount) {
  (void)tx.execute("UPDATE balance SET total = total + $1 WHERE id = 1", amount);
}

// Processes one delivery of an event; returns true if the effect ran.
bool process(idem::Store& store, const idem::Uuid& event_id, std::int64_t amount,
             bool fail = false) {
  auto tx = store.begin();
  if (!tx->mark_processed(event_id, "example-group")) return false;  // a duplicate: skip
  apply_effect(*tx, amount);
  if (fail) throw std::runtime_error("the effect failed");  // tx rolls back, mark included
  tx->commit();
  return true;
}

}  // namespace

int main() {
  auto store = idem::open_store("sqlite://:memory:");
  store->migrate();
  {
    auto tx = store->begin();
    (void)tx->execute("CREATE TABLE balance (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)");
    (void)tx->execute("INSERT INTO balance VALUES (1, 0)");
    tx->commit();
  }

  const idem::Uuid event_id = idem::new_uuid_v7();  // born once, with the event

  try {
    process(*store, event_id, 100, /*fail=*/true);
  } catch (const std::exception& e) {
    std::cout << "first delivery failed (" << e.what() << "): mark rolled back\n";
  }
  const bool second = process(*store, event_id, 100);  // redelivery: processed now
  const bool third = process(*store, event_id, 100);   // duplicate: skipped

  auto tx = store->begin();
  const std::int64_t total = tx->execute("SELECT total FROM balance WHERE id = 1")[0].int64(0);
  std::cout << "second delivery applied: " << second << ", third skipped: " << !third
            << ", balance: " << total << "\n";
  return (second && !third && total == 100) ? 0 : 1;
}
