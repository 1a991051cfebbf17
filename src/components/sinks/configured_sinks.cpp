#include "idem/sinks/configured_sinks.hpp"

#include <algorithm>
#include <map>
#include <span>
#include <string>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "sinks/configured_sinks_impl.hpp"
#include "sinks/event_reader.hpp"
#include "sinks/route_call.hpp"
#include "sinks/sink_event.hpp"

namespace idem::sinks {

using detail::CallAnswer;
using detail::CompiledRoute;
using detail::EventReader;
using detail::SinkEvent;

ConfiguredSinks::ConfiguredSinks(SinkConfig config, Backend backend)
    : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->backend = backend;
  std::vector<ConfigProblem> problems;
  for (const Route& route : impl_->config.routes) {
    auto compiled = std::make_unique<CompiledRoute>();
    compiled->config = &route;
    if (!route.schema.empty()) {
      try {
        compiled->schema = std::make_unique<detail::JsonSchema>(route.schema);
      } catch (const std::exception& e) {
        problems.push_back({route.where.key + ".schema", route.where.origin, e.what()});
      }
    }
    impl_->routes.push_back(std::move(compiled));
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
  for (const auto& [topic, format] : impl_->config.topics) {
    std::vector<const CompiledRoute*> routes;
    for (const auto& r : impl_->routes) {
      if (r->config->topic == topic) routes.push_back(r.get());
    }
    impl_->readers.emplace(
        topic, std::make_unique<EventReader>(topic, format, std::move(routes), backend));
  }
}

ConfiguredSinks::~ConfiguredSinks() = default;

const SinkConfig& ConfiguredSinks::config() const noexcept {
  return impl_->config;
}

void ConfiguredSinks::check(Store& store) const {
  std::vector<ConfigProblem> problems;
  for (const Route& route : impl_->config.routes) {
    for (const SqlStatement& st : route.sql) {
      const std::vector<Param> nulls(st.params.size(), Param(nullptr));
      const auto tx = store.begin();
      try {
        (void)tx->execute_params(st.sql, nulls);
      } catch (const Error& e) {
        // What the consumer would do with it: a retry is the store's moment, a stop is the
        // statement's problem, and a dead letter is the NULLs' (a NOT NULL constraint).
        switch (idem::effect_error_outcome(e)) {
          case idem::StoreErrorOutcome::Retry: throw;
          case idem::StoreErrorOutcome::Stop:
            problems.push_back({st.where.key, st.where.origin,
                                fmt::format("the {} database refuses this statement: {}",
                                            to_string(store.backend()), e.what())});
            break;
          case idem::StoreErrorOutcome::DeadLetter: break;
        }
      }
      tx->rollback();
    }
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

void ConfiguredSinks::install(Consumer& consumer, std::size_t max_in_flight,
                              SinkObservers observers, const http::BreakerPolicy& breaker) {
  impl_->observers = std::move(observers);
  for (auto& [topic, reader] : impl_->readers) {
    EventReader* r = reader.get();
    RecordParser<SinkEvent> parser = [r](const RecordInfo& record, const ParseLimits& limits) {
      return r->read(record, limits);
    };
    bool calls = false;
    bool ordered = false;
    for (const auto& route : impl_->routes) {
      if (route->config->topic != topic || !route->config->http) continue;
      calls = true;
      ordered = ordered || !route->config->http->ordering_key.empty();
      impl_->calls.emplace(route.get(), std::make_unique<detail::RouteCalls>(
                                            *route->config, impl_->backend, impl_->observers));
    }
    if (!calls) {
      consumer.on<SinkEvent>(topic, std::move(parser),
                             [](const SinkEvent& event, const RecordInfo&, Transaction& tx) {
                               return detail::apply_statements(event, nullptr, tx);
                             });
      continue;
    }
    if (!impl_->client) {
      http::ClientConfig client;
      // One connection per call in flight (HTTP/1.1 carries one request at a time).
      client.max_host_connections = std::max(client.max_host_connections, max_in_flight);
      client.breaker = breaker;
      // Every route is registered before the consumer starts a call, so the loop thread
      // reads a map that no longer changes.
      client.on_breaker = [impl = impl_.get()](std::string_view endpoint, bool open,
                                               std::string_view why) {
        for (const auto& [route, route_calls] : impl->calls)
          route_calls->endpoint_changed(endpoint, open, why);
      };
      impl_->client = std::make_unique<http::AsyncClient>(client);
    }
    EffectHandler<SinkEvent, CallAnswer> effect;
    effect.call = [impl = impl_.get()](const SinkEvent& event, const RecordInfo&,
                                       const CallCompletion<CallAnswer>& done) {
      // A type of this topic without a call (or skipped): nothing to send.
      if (event.route == nullptr || !event.request) return done.done(CallAnswer{});
      impl->calls.at(event.route)->start(*impl->client, event, done);
    };
    effect.apply = [](const SinkEvent& event, const RecordInfo&, const CallAnswer& answer,
                      Transaction& tx) { return detail::apply_statements(event, &answer, tx); };
    if (ordered) {
      effect.ordering_key = [](const SinkEvent& event, const RecordInfo& record) {
        return event.ordering_key.empty() ? std::string(record.key) : event.ordering_key;
      };
    }
    consumer.on_effect<SinkEvent, CallAnswer>(topic, std::move(parser), std::move(effect));
  }
}

std::vector<std::string> ConfiguredSinks::paused_routes() const {
  std::vector<std::string> paused;
  for (const auto& [route, calls] : impl_->calls) {
    if (auto why = calls->paused_reason(); !why.empty())
      paused.push_back(fmt::format("{}: {}", route->config->name, why));
  }
  return paused;
}

}  // namespace idem::sinks
