#pragma once
// Reads the records of one topic into SinkEvents: a JSON object, or a CloudEvents 1.0
// record in the Kafka protocol binding (binary mode: ce_ headers and the data as the
// value; structured mode: content-type application/cloudevents+json), or with format
// "auto" either, as each record's headers say; then the event's id (a UUIDv7, IDEM-1),
// its type, its route and every parameter of the route's effects. simdjson parses each
// record once (DOM, so the whole record is checked well-formed and valid UTF-8, and each
// pointer is a cheap lookup), into buffers reused record after record; what the DOM does
// not keep as written (a non-integer number's digits, a value passed on as JSON) is read
// from the record's bytes on demand.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "idem/consumer.hpp"
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
  struct Parsed;
  [[nodiscard]] std::optional<ValidationError> parse(const RecordInfo& record, Parsed& out);
  [[nodiscard]] std::optional<ValidationError> bind(const RecordInfo& record, const Parsed& parsed,
                                                    SinkEvent& event);
  [[nodiscard]] std::optional<ValidationError> render(const RecordInfo& record,
                                                      const Parsed& parsed, SinkEvent& event);
  /// The value of `spec` for this record, bound as a store of `backend` binds it.
  [[nodiscard]] Validated<Param> value_of(const ParamSpec& spec, Backend backend,
                                          const RecordInfo& record, const Parsed& parsed,
                                          const Uuid& id);
  /// The text as written of the value at `pointer` in the record (JsonLiterals::find).
  [[nodiscard]] std::optional<std::string_view> literal(std::string_view pointer);

  std::string topic_;
  TopicFormat format_;
  std::vector<const CompiledRoute*> routes_;
  Backend backend_;
  // simdjson's parsers and the record's padded copy. Behind a pointer so no other file
  // depends on simdjson's layout, which its build flags change (SIMDJSON_THREADS_ENABLED).
  struct Buffers;
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace idem::sinks::detail
