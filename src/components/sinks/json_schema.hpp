#pragma once
// A route's optional JSON Schema. valijson (Debian's libvalijson-dev, header-only, drafts 3,
// 4 and 7): it is the validator Debian packages for C++ (nlohmann-json-schema is not in
// Debian 12) and is maintained. The schema file is read through valijson's adapter for
// nlohmann::json; an event is read through json_value_adapter.hpp, over the tree of the
// record's one parse, so a route with a schema parses nothing again.
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "idem/events/event_reader.hpp"

namespace idem::sinks::detail {

class JsonSchema {
 public:
  /// Loads and compiles the schema in `path`.
  /// \throws std::runtime_error saying why it cannot be used (unreadable, not JSON, not a
  ///   schema valijson understands).
  explicit JsonSchema(const std::string& path);
  ~JsonSchema();
  JsonSchema(const JsonSchema&) = delete;
  JsonSchema& operator=(const JsonSchema&) = delete;

  /// The first way `data` breaks the schema, naming the property (`/: ... property name
  /// 'amount'`), or nullopt.
  /// Thread-safe (the compiled schema is only read).
  [[nodiscard]] std::optional<std::string> violation(const JsonValue& data) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem::sinks::detail
