#pragma once
/// \file
/// A consumer run as `idem consume` runs it, for the CLI and for any embedding (a binding
/// to another language): the stop watchdog, the maintenance task, the logger, metrics and
/// what admin.listen serves, around one idem::Consumer. The caller installs the handlers
/// (on consumer()), and decides how a stop is asked for: the CLI from SIGTERM/SIGINT, a
/// Python binding from its own signal handling, calling stop() from another thread.
///
///   ConsumerService service(settings, config);   // watchdog, maintenance, metrics
///   auto store = open_store(settings.store_url, settings.store_options);
///   ...                                          // migrate, prepare routes on `store`
///   auto& routes = service.own(make_routes(*store));  // outlives the consumer
///   Consumer& consumer = service.start(std::move(store));
///   consumer.on<MyEvent>("topic", handler);
///   ConsumerStats stats = service.run();         // until stop(), from any thread

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "idem/config.hpp"
#include "idem/consumer.hpp"
#include "idem/logging.hpp"
#include "idem/metrics/metrics.hpp"
#include "idem/retention.hpp"
#include "idem/service/admin_endpoints.hpp"
#include "idem/service/stop_watchdog.hpp"
#include "idem/store.hpp"

namespace idem {

class ConsumerService {
 public:
  /// Arms nothing yet: starts the watchdog's thread (armed by stop(): the process ends
  /// with exit status 1 when the stop has not finished within `config.stop_timeout` and
  /// one second, naming what was not done), the maintenance task (maintenance.interval,
  /// its reports on stderr) and, with admin.listen, the metrics the consumer will feed.
  ConsumerService(const Config& settings, ConsumerConfig config);
  /// Stops the consumer if it runs, then everything in the reverse order of its start.
  ~ConsumerService();
  ConsumerService(const ConsumerService&) = delete;
  ConsumerService& operator=(const ConsumerService&) = delete;

  /// Makes the consumer on `store` (its hooks log through the configured logger and, with
  /// admin.listen, feed the metrics). Call once; install the handlers on what it returns.
  Consumer& start(std::unique_ptr<Store> store);

  /// The consumer start() made. \throws Error(InvalidArgument) before start().
  [[nodiscard]] Consumer& consumer();
  /// The metrics when admin.listen is set (a caller may time its handlers with them);
  /// null otherwise.
  [[nodiscard]] Metrics* metrics() noexcept;
  /// The logger of `log.*`, for the parts the caller adds (routes, handlers).
  [[nodiscard]] const Logger& logger() const noexcept { return logger_; }
  /// Keeps `part` (what the handlers use: routes, clients) until the consumer is
  /// destroyed, and destroys it after the consumer, still covered by the watchdog.
  template <class T>
  T& own(std::unique_ptr<T> part) {
    T& kept = *part;
    owned_.push_back(std::shared_ptr<void>(std::move(part)));
    return kept;
  }
  /// One more /readyz check (a route's), besides the consumer's and the store's. Before
  /// run().
  void add_readiness(ReadinessCheck check);

  /// Serves what admin.listen serves, calls `on_serving` (with the admin port, or
  /// nullopt without admin.listen) just before the consumer starts, runs the consumer
  /// until stop() on the calling thread, and returns its final counts. A caller whose own
  /// thread must stay free (a Python interpreter's main thread, which takes its signals)
  /// calls it on a thread of its own.
  ConsumerStats run(const std::function<void(std::optional<int> admin_port)>& on_serving = {});

  /// Asks run() to finish the batch in progress, commit and leave the group, and arms the
  /// watchdog. Thread-safe and idempotent; returns at once.
  void stop();

 private:
  const Config& settings_;
  ConsumerConfig config_;
  // Declaration order is destruction order reversed: the watchdog is destroyed last, so
  // it covers the destruction of everything after it.
  StopWatchdog watchdog_;
  std::optional<MaintenanceTask> maintenance_;
  Logger logger_;
  Metrics metrics_;
  bool admin_enabled_ = false;
  std::vector<ReadinessCheck> extra_checks_;
  std::vector<std::shared_ptr<void>> owned_;  // outlives consumer_ (see own())
  std::unique_ptr<Consumer> consumer_;
};

}  // namespace idem
