// An exactly-once consumer that links only the core (idem::idem) (it is also the
// packaging test's outside project, tests/packaging/): a consumer of
// its own event type against a Kafka broker (argv[1]: bootstrap servers, argv[2]: topic)
// and a SQLite store (argv[3]: file). It produces 20 deposits plus a resend of 5 of them
// (same event ids, as a producer retry after a crash would), consumes them, and checks
// that the balance holds each deposit once.
#include <idem/consumer.hpp>
#include <idem/producer.hpp>
#include <idem/store.hpp>
#include <idem/uuid.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

struct Deposit {
  idem::Uuid event_id;
  std::int64_t amount = 0;
};

// The codec the consumer needs for each event type: parse at the boundary, give the
// dedup key. The wire format here is "<uuid>:<amount>".
template <>
struct idem::EventCodec<Deposit> {
  static idem::Validated<Deposit> parse(std::string_view payload, const idem::ParseLimits&) {
    const auto colon = payload.find(':');
    if (colon == std::string_view::npos) {
      return idem::ValidationError{"payload", idem::ValidationReason::InvalidJson,
                                   "expected <uuid>:<amount>"};
    }
    const auto id = idem::Uuid::parse(payload.substr(0, colon));
    if (!id || id->version() != 7) {
      return idem::ValidationError{"event_id", idem::ValidationReason::NotUuidV7,
                                   "event_id must be a UUIDv7"};
    }
    Deposit d{*id, 0};
    const auto amount = payload.substr(colon + 1);
    const auto [end, ec] = std::from_chars(amount.data(), amount.data() + amount.size(), d.amount);
    if (ec != std::errc{} || end != amount.data() + amount.size()) {
      return idem::ValidationError{"amount", idem::ValidationReason::WrongType,
                                   "amount must be an integer"};
    }
    return d;
  }
  static const idem::Uuid& event_id(const Deposit& d) noexcept { return d.event_id; }
};

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: consumer BOOTSTRAP TOPIC SQLITE_FILE\n";
    return 2;
  }
  const std::string bootstrap = argv[1];
  const std::string topic = argv[2];
  const std::string db_url = std::string("sqlite://") + argv[3];
  // The store keeps the group's position in the topic with the effects (offsets in the
  // store), and each run of this example starts a new broker whose topic begins at offset
  // 0 again: a store left by an earlier run would place the group past the new records.
  // So every run starts from a new store, as it starts from a new broker.
  for (const char* suffix : {"", "-wal", "-shm"})
    std::remove((std::string(argv[3]) + suffix).c_str());

  const auto read_balance = [&] {
    auto store = idem::open_store(db_url);
    auto tx = store->begin();
    return tx->execute("SELECT total FROM balance WHERE id = 1")[0].int64(0);
  };
  {
    auto store = idem::open_store(db_url);
    store->migrate();  // idem's own tables only; the application's table is its own
    auto tx = store->begin();
    (void)tx->execute(
        "CREATE TABLE IF NOT EXISTS balance (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)");
    (void)tx->execute("INSERT INTO balance VALUES (1, 0) ON CONFLICT DO NOTHING");
    tx->commit();
  }
  const std::int64_t before = read_balance();

  std::vector<std::string> payloads;
  std::int64_t expected = 0;
  for (int i = 1; i <= 20; ++i) {
    payloads.push_back(idem::new_uuid_v7().to_string() + ":" + std::to_string(i));
    expected += i;
  }
  {
    idem::ProducerConfig producer_config;
    producer_config.bootstrap_servers = bootstrap;
    idem::Producer producer(producer_config);
    std::vector<idem::Delivery> deliveries;
    for (int copy = 0; copy < 2; ++copy) {
      for (std::size_t i = 0; i < payloads.size(); ++i) {
        if (copy == 1 && i >= 5) break;  // the resend: same payloads, same event ids
        idem::ProducerMessage message;
        message.topic = topic;
        message.key = std::to_string(i);
        message.payload = payloads[i];
        (void)producer.send(std::move(message));
      }
    }
    if (!producer.flush(std::chrono::seconds(30), deliveries)) {
      std::cerr << "produce: not every message was acknowledged\n";
      return 1;
    }
  }

  idem::ConsumerConfig config;
  config.bootstrap_servers = bootstrap;
  config.group_id = "outside-deposits";
  config.topics = {topic};
  config.kafka = {{"auto.offset.reset", "earliest"}};
  config.check_topic_retention = false;  // the dev broker does not answer DescribeConfigs
  idem::Consumer consumer(config, idem::open_store(db_url));
  consumer.on<Deposit>(topic, [](const Deposit& d, const idem::RecordInfo&, idem::Transaction& tx) {
    tx.execute_deferred("UPDATE balance SET total = total + $1 WHERE id = 1", d.amount);
    return idem::Outcome::Done;
  });
  std::thread runner([&] { consumer.run(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto stats = consumer.stats();
    if (stats.processed + stats.duplicates >= 25) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling, bounded
  }
  consumer.stop();
  runner.join();

  const auto stats = consumer.stats();
  const std::int64_t deposited = read_balance() - before;
  std::cout << "processed=" << stats.processed << " duplicates=" << stats.duplicates
            << " deposited=" << deposited << " expected=" << expected << "\n";
  return stats.processed == 20 && deposited == expected ? 0 : 1;
}
