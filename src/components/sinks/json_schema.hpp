#pragma once
// A route's optional JSON Schema. valijson (Debian's libvalijson-dev, header-only, drafts 3,
// 4 and 7): it is the validator Debian packages for C++ (nlohmann-json-schema is not in
// Debian 12), is maintained, and reads documents through an adapter for nlohmann::json,
// which idem already uses. Events are parsed once more, by nlohmann, only for routes
// that declare a schema.
#include <memory>
#include <optional>
#include <string>
#include <string_view>

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

  /// The first way `json` breaks the schema, naming where (`/amount: ...`), or nullopt.
  /// Thread-safe (the compiled schema is only read).
  [[nodiscard]] std::optional<std::string> violation(std::string_view json) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem::sinks::detail
