// The consumer across the binding (consumer_binding.hpp). The engine stays the C++ one: the
// records are read, checked and deduplicated there, each event reaches Python only when
// its handler is to run, inside the batch's transaction, and the handler's outcome goes
// back as the C++ handlers' does.
#include "consumer_binding.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli_schema.hpp"
#include "configured_sinks_wiring.hpp"
#include "handler_tx.hpp"
#include "idem/config.hpp"
#include "idem/consumer.hpp"
#include "idem/error.hpp"
#include "idem/http/async_client.hpp"
#include "idem/service/consumer_service.hpp"
#include "idem/service/route_pauses.hpp"
#include "idem/store.hpp"
#include "python_topic.hpp"
#include "store_schema.hpp"

namespace py = pybind11;

namespace idem::python {
namespace {

py::dict to_dict(const ConsumerStats& s) {
  py::dict d;
  d["delivered"] = s.delivered;
  d["processed"] = s.processed;
  d["duplicates"] = s.duplicates;
  d["dead_lettered"] = s.dead_lettered;
  d["retries"] = s.retries;
  d["retry_topic_sends"] = s.retry_topic_sends;
  d["transactions"] = s.transactions;
  d["offset_commits"] = s.offset_commits;
  d["stale"] = s.stale;
  d["calls"] = s.calls;
  d["call_retries"] = s.call_retries;
  py::dict by_reason;
  for (const auto& [reason, n] : s.dead_lettered_by_reason) by_reason[py::str(reason)] = n;
  d["dead_lettered_by_reason"] = by_reason;
  return d;
}

// idem._idem.Consumer: the configuration loaded as `idem consume` loads it, the Python
// topics added, then run() on the caller's thread (a thread of its own: Python's main
// thread keeps its signals) until stop().
class PythonConsumer {
 public:
  PythonConsumer(const std::string& file,
                 const std::vector<std::pair<std::string, std::string>>& settings,
                 const std::string& origin) {
    ConfigSources sources;
    sources.file = file;
    sources.environment = process_environment();
    for (const auto& [key, value] : settings) sources.flags.push_back({key, value, origin});
    settings_ = load_config(sources, cli::cli_config_schema());
    routes_ = cli::configured_routes(settings_);
  }

  [[nodiscard]] std::vector<std::string> warnings() const {
    std::vector<std::string> all = settings_.renamed_warnings;
    all.insert(all.end(), settings_.warnings.begin(), settings_.warnings.end());
    return all;
  }

  void add_topic(const std::string& topic, const std::string& format, const std::string& id_pointer,
                 const std::string& type_pointer,
                 const std::vector<std::optional<std::string>>& types, py::object dispatch,
                 py::object request, py::object enter, py::object leave) {
    EventReaderOptions options;
    options.format = event_format(format);
    options.id_pointer = id_pointer;
    options.type_pointer = type_pointer;
    topics_.push_back(std::make_unique<PythonTopic>(topic, std::move(options), types,
                                                    std::move(dispatch), std::move(request),
                                                    std::move(enter), std::move(leave)));
  }

  py::dict run() {
    std::optional<StopConsumer> stopped;
    ConsumerStats stats;
    {
      py::gil_scoped_release unlocked;
      try {
        stats = run_unlocked();
      } catch (const StopConsumer& stop) {
        stopped = stop;
      }
    }
    if (stopped) {
      PyErr_SetString(PyExc_KeyboardInterrupt, stopped->reason.c_str());
      throw py::error_already_set();
    }
    return to_dict(stats);
  }

  void stop() {
    const std::lock_guard lock(mutex_);
    stop_requested_ = true;
    if (service_) service_->stop();
  }

  py::dict stats() {
    ConsumerStats s;
    {
      const std::lock_guard lock(mutex_);
      if (service_ && running_) s = service_->consumer().stats();
    }
    return to_dict(s);
  }

  [[nodiscard]] std::optional<int> admin_port() const {
    const int port = admin_port_.load();
    return port < 0 ? std::nullopt : std::optional<int>(port);
  }

  [[nodiscard]] std::string describe() const { return settings_.describe(); }
  [[nodiscard]] bool has_routes() const noexcept { return routes_.has_value(); }

 private:
  // The topics of the Python handlers and of the file's routes; one topic has one handler.
  ConsumerConfig consumer_config() const {
    std::vector<std::string> read;
    for (const auto& t : topics_) read.push_back(t->name());
    if (routes_) {
      for (const std::string& routed : routes_->topic_names()) {
        if (std::find(read.begin(), read.end(), routed) != read.end()) {
          throw ConfigError({{"routes",
                              {ConfigLayer::File, routes_->file},
                              fmt::format("topic {} has routes in {} and a Python handler: one "
                                          "topic has one handler (the routes or Python's)",
                                          routed, routes_->file)}});
        }
        read.push_back(routed);
      }
    }
    ConsumerConfig config = settings_.consumer_config();
    cli::adopt_topics(read, "the handlers", settings_, config);
    return config;
  }

  ConsumerStats run_unlocked() {
    settings_.require({"store.url", "kafka.bootstrap.servers"});
    const ConsumerConfig config = consumer_config();
    {
      const std::lock_guard lock(mutex_);
      if (service_) {
        throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                    "this App ran already: make a new one to run again");
      }
      service_ = std::make_unique<ConsumerService>(settings_, config);
    }
    auto store = open_store(settings_.store_url, settings_.store_options);
    sinks::ConfiguredSinks* configured = nullptr;
    if (routes_) {
      configured = &service_->own(cli::start_configured_sinks(std::move(*routes_), *store));
      routes_.reset();
    } else {
      static_cast<void>(cli::migrate_store(*store, {}, /*reference=*/false));
    }
    for (auto& topic : topics_) topic->use_backend(store->backend());
    Consumer& consumer = service_->start(std::move(store));
    if (configured != nullptr) {
      configured->install(consumer, config.max_in_flight,
                          cli::route_observers(configured->config(), service_->metrics(),
                                               config.group_id, service_->logger().lines("sinks")),
                          settings_.get<http::BreakerPolicy>());
      service_->add_readiness(cli::routes_readiness(*configured));
    }
    use_http_client(config);
    for (auto& topic : topics_) {
      PythonTopic* t = topic.get();
      RecordParser<PythonEvent> parser = [t](const RecordInfo& record, const ParseLimits& limits) {
        return t->parse(record, limits);
      };
      if (t->calls()) {
        consumer.on_effect<PythonEvent, HttpAnswer>(
            t->name(), std::move(parser),
            {.call =
                 [t](const PythonEvent& event, const RecordInfo& record,
                     const CallCompletion<HttpAnswer>& done) {
                   t->start_call(event, record, done);
                 },
             .apply = [t](const PythonEvent& event, const RecordInfo& record,
                          const HttpAnswer& answer,
                          Transaction& tx) { return t->invoke(event, record, tx, &answer); },
             .ordering_key = {}},
            t->scope());
      } else {
        consumer.on<PythonEvent>(
            t->name(), std::move(parser),
            [t](const PythonEvent& event, const RecordInfo& record, Transaction& tx) {
              return t->invoke(event, record, tx);
            },
            t->scope());
      }
    }
    {
      const std::lock_guard lock(mutex_);
      running_ = true;
      if (stop_requested_) service_->stop();
    }
    return service_->run([this](std::optional<int> port) { admin_port_ = port.value_or(-1); });
  }

  // The HTTP client of the topics whose handlers declare a call, kept by the service until
  // after the consumer: its pauses are reported as a configured route's are (a log line,
  // idem_route_paused, /readyz), under the route name `python`.
  void use_http_client(const ConsumerConfig& config) {
    if (std::none_of(topics_.begin(), topics_.end(), [](const auto& t) { return t->calls(); }))
      return;
    auto& pauses = service_->own(std::make_unique<RoutePauses>(
        "python", service_->metrics(), config.group_id, service_->logger().lines("python")));
    http::ClientConfig client_config;
    // One connection per call in flight (HTTP/1.1 carries one request at a time).
    client_config.max_host_connections =
        std::max(client_config.max_host_connections, config.max_in_flight);
    client_config.breaker = settings_.get<http::BreakerPolicy>();
    client_config.on_breaker = pauses.breaker_observer();
    auto& client = service_->own(std::make_unique<http::AsyncClient>(client_config));
    for (auto& topic : topics_) {
      if (topic->calls()) topic->use_client(client, pauses.refusal_observer());
    }
    service_->add_readiness(pauses.readiness());
  }

  Config settings_;
  std::optional<sinks::SinkConfig> routes_;
  // Before service_: the consumer's handlers point to them, so they outlive it.
  std::vector<std::unique_ptr<PythonTopic>> topics_;
  std::mutex mutex_;  // service_'s creation against stop() and stats() from other threads
  bool stop_requested_ = false;
  bool running_ = false;
  std::atomic<int> admin_port_{-1};
  std::unique_ptr<ConsumerService> service_;
};

}  // namespace

void bind_consumer(py::module_& module) {
  HandlerTx::bind(module);
  py::class_<PythonConsumer>(module, "Consumer")
      .def(py::init<const std::string&, const std::vector<std::pair<std::string, std::string>>&,
                    const std::string&>(),
           py::arg("config_file"), py::arg("settings"), py::arg("origin"))
      .def("warnings", &PythonConsumer::warnings)
      .def("add_topic", &PythonConsumer::add_topic, py::arg("topic"), py::arg("format"),
           py::arg("id_pointer"), py::arg("type_pointer"), py::arg("types"), py::arg("dispatch"),
           py::arg("request"), py::arg("enter"), py::arg("leave"))
      .def("run", &PythonConsumer::run)
      .def("stop", &PythonConsumer::stop)
      .def("stats", &PythonConsumer::stats)
      .def("describe", &PythonConsumer::describe)
      .def_property_readonly("has_routes", &PythonConsumer::has_routes)
      .def_property_readonly("admin_port", &PythonConsumer::admin_port);
}

}  // namespace idem::python
