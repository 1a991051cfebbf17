#pragma once
// Reads the records of one topic into SinkEvents: the core's event reader
// (idem/events/event_reader.hpp) reads each record's envelope (JSON or CloudEvents, the
// event's id, a UUIDv7 (IDEM-1), its type and its data, one DOM parse per record); this
// one finds the event's route, checks the route's schema and reads every parameter of
// the route's effects from that one parse.
#include <optional>
#include <string>
#include <vector>

#include "idem/consumer.hpp"
#include "idem/events/event_reader.hpp"
#include "idem/sinks/sink_config.hpp"
#include "sinks/sink_event.hpp"

namespace idem::sinks::detail {

class EventReader {
 public:
  EventReader(std::string topic, TopicFormat format, std::vector<const CompiledRoute*> routes,
              Backend backend);
  ~EventReader();
  EventReader(const EventReader&) = delete;
  EventReader& operator=(const EventReader&) = delete;

  /// The event of `record`, or why it can never be processed (a ValidationError naming
  /// the field and the rule). Never throws. Not thread-safe (the consumer reads records
  /// on its run() thread).
  [[nodiscard]] Validated<SinkEvent> read(const RecordInfo& record, const ParseLimits& limits);

 private:
  [[nodiscard]] std::optional<ValidationError> bind(const RecordInfo& record,
                                                    const EventView& event, SinkEvent& out);
  [[nodiscard]] std::optional<ValidationError> render(const RecordInfo& record,
                                                      const EventView& event, SinkEvent& out);
  /// The value of `spec` for this record, bound as a store of `backend` binds it.
  [[nodiscard]] static Validated<Param> value_of(const ParamSpec& spec, Backend backend,
                                                 const RecordInfo& record, const EventView& event);

  std::string topic_;
  TopicFormat format_;
  std::vector<const CompiledRoute*> routes_;
  Backend backend_;
  idem::EventReader envelope_;
};

}  // namespace idem::sinks::detail
