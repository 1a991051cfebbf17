// An outside project: marks one event twice in an in-memory SQLite store.
#include <idem/store.hpp>
#include <idem/uuid.hpp>

#include <iostream>

int main() {
  auto store = idem::open_store("sqlite://:memory:");
  store->migrate();
  const idem::Uuid id = idem::new_uuid_v7();
  auto tx = store->begin();
  const bool first = tx->mark_processed(id, "outside");
  const bool second = tx->mark_processed(id, "outside");
  tx->commit();
  std::cout << "first=" << first << " second=" << second << "\n";
  return first && !second ? 0 : 1;
}
