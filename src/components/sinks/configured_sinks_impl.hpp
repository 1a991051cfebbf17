#pragma once
// What a ConfiguredSinks holds: the configuration, its compiled routes, one reader per
// topic, and what the routes' calls share. Shared by configured_sinks.cpp (the consumer's
// side) and route_tester.cpp (`idem config test`), which runs the same parts.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "idem/http/async_client.hpp"
#include "idem/sinks/configured_sinks.hpp"
#include "sinks/event_reader.hpp"
#include "sinks/route_call.hpp"
#include "sinks/sink_event.hpp"

namespace idem::sinks {

struct ConfiguredSinks::Impl {
  SinkConfig config;
  Backend backend = Backend::Sqlite;
  std::vector<std::unique_ptr<detail::CompiledRoute>> routes;  // parallel to config.routes
  std::map<std::string, std::unique_ptr<detail::EventReader>> readers;
  std::map<const detail::CompiledRoute*, std::unique_ptr<detail::RouteCalls>> calls;
  std::unique_ptr<http::AsyncClient> client;  // one event loop for every route's calls
  SinkObservers observers;
};

}  // namespace idem::sinks
