// `idem orders create`: the reference system's order service (idem::OrderService)
// from the command line; creates and confirms orders, each confirmation writing
// order.confirmed.v1 to the outbox in the same transaction.
#include <chrono>
#include <iostream>
#include <memory>
#include <random>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/amount.hpp"
#include "idem/outbox.hpp"
#include "idem/reference/order_service.hpp"
#include "idem/store.hpp"
#include "store_schema.hpp"

namespace idem::cli {

void register_orders(CLI::App& app, ExitCode& exit_code) {
  struct Options {
    std::string db;
    std::int64_t count = 0;
    std::int64_t customers = 100;
    std::string topic = std::string(kOrderConfirmedTopic);
    bool migrate = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* orders = app.add_subcommand("orders", "The reference system's order service");
  orders->require_subcommand(1);
  CLI::App* create = orders->add_subcommand(
      "create", "Create and confirm N orders (each confirmation enqueues order.confirmed.v1)");
  // The store comes from the loader (file, environment, flags); the scenario stays flags.
  auto cfg = std::make_shared<ConfigOptions>(create);
  cfg->bind(create->add_option("--db", opts->db,
                               "Store URL: postgresql://... or sqlite:///path.db (store.url)"),
            "store.url");
  create->add_option("--count", opts->count, "Orders to create and confirm")
      ->required()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{100'000'000}));
  create->add_option("--customers", opts->customers, "Customer ids are drawn from 1..M")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1'000'000'000}))
      ->capture_default_str();
  create->add_option("--topic", opts->topic, "Topic of the events")->capture_default_str();
  create->add_flag("--migrate", opts->migrate, "Apply pending migrations first");
  create->callback([opts, cfg, &exit_code] {
    const Config settings = cfg->load();
    auto store = open_configured_store(settings);
    if (opts->migrate) static_cast<void>(migrate_store(*store, {}, /*reference=*/true));
    Outbox outbox;
    OrderServiceConfig config;
    config.topic = opts->topic;
    OrderService service(outbox, config);
    std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<std::int64_t> customer(1, opts->customers);
    std::uniform_int_distribution<std::int64_t> cents(100, 100'000);

    const auto start = std::chrono::steady_clock::now();
    std::int64_t first = 0;
    {
      auto tx = store->begin();
      first = OrderService::next_order_id(*tx);
      tx->commit();
    }
    std::int64_t confirmed = 0;
    for (std::int64_t i = 0; i < opts->count; ++i) {
      const std::int64_t id = first + i;
      {
        auto tx = store->begin();
        service.create(*tx, id, customer(rng), Amount::from_hundredths(cents(rng)));
        tx->commit();
      }
      if (service.confirm(*store, id)) ++confirmed;
      if ((i + 1) % 10'000 == 0) {
        std::cerr << fmt::format("orders: {} of {} confirmed\n", i + 1, opts->count);
      }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << fmt::format(
        "created {} orders (ids {}..{}), confirmed {}, {} events enqueued to {} in {:.2f} s "
        "({:.0f} orders/s)\n",
        opts->count, first, first + opts->count - 1, confirmed, confirmed, opts->topic, secs,
        static_cast<double>(opts->count) / std::max(secs, 1e-9));
    exit_code.value = confirmed == opts->count ? 0 : 1;
  });
}

}  // namespace idem::cli
