// The producer side (OUTBOX): the business change and the event commit in one
// transaction; the relay publishes the event afterwards and marks it published only
// once the broker acknowledged it. A crash between the two is harmless: the row stays
// unpublished and the relay sends it again with the same event_id.
#include <idem/devtools/dev_broker.hpp>
#include <idem/outbox.hpp>
#include <idem/relay.hpp>
#include <idem/store.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

int main() {
  // An embedded Kafka-protocol broker (librdkafka's mock cluster); real Kafka is only a
  // different bootstrap.servers away.
  idem::DevBrokerOptions broker_options;
  broker_options.topics = {{"accounts.deposit", 3}};
  idem::DevBroker broker(broker_options);
  const std::string db = (std::filesystem::temp_directory_path() /
                          ("idem_example_outbox_" + std::to_string(::getpid()) + ".db"))
                             .string();
  const std::string url = "sqlite://" + db;

  auto store = idem::open_store(url);
  store->migrate();
  {
    auto tx = store->begin();
    (void)tx->execute("CREATE TABLE account (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)");
    (void)tx->execute("INSERT INTO account VALUES (7, 0)");
    tx->commit();
  }

  idem::Outbox outbox;
  for (int amount : {10, 20, 30}) {
    auto tx = store->begin();
    (void)tx->execute("UPDATE account SET balance = balance + $1 WHERE id = 7", amount);
    // The event_id is born here, once, with the event (IDEM-1); the factory puts it in
    // the payload. Key = the aggregate id, so one account's events keep their order.
    outbox.enqueue(*tx, [&](const idem::Uuid& event_id) {
      idem::OutboxMessage message;
      // std::string values (not char literals assigned): GCC 12 at -O3 gives a false
      // -Wrestrict warning for operator=(const char*) here (GCC bug 105329).
      message.aggregate_type = std::string("account");
      message.aggregate_id = std::string("7");
      message.topic = std::string("accounts.deposit");
      message.payload = R"({"event_id":")";
      message.payload += event_id.to_string();
      message.payload += R"(","amount":)";
      message.payload += std::to_string(amount);
      message.payload += "}";
      return message;
    });
    tx->commit();  // the balance and its event, or neither
  }

  idem::RelayConfig config;
  config.store_url = url;
  config.producer.bootstrap_servers = broker.bootstrap_servers();
  idem::Relay relay(config);
  const bool drained = relay.run_until_empty(std::chrono::seconds(60));
  const auto progress = relay.progress();
  std::cout << "published " << progress.published << " events, outbox drained: " << drained << "\n";
  std::filesystem::remove(db);
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  return drained && progress.published == 3 ? 0 : 1;
}
