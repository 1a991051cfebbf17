#pragma once
// Finds JSON values as their text in a document, as written: what simdjson's DOM loses (it
// keeps a non-integer number as a double only, and writes a value back out from that).
// Private to the core (JsonValue::literal() is its public face); tests include it.
#include <memory>
#include <optional>
#include <string_view>

#include <simdjson.h>

namespace idem::detail {

/// Reads the document once more, on demand, up to the value.
class JsonLiterals {
 public:
  JsonLiterals();
  ~JsonLiterals();
  JsonLiterals(const JsonLiterals&) = delete;
  JsonLiterals& operator=(const JsonLiterals&) = delete;

  /// The text of the value at `pointer` (RFC 6901; keys compared unescaped, the first of
  /// a key written twice, as the DOM finds it) in `json`, without the whitespace around
  /// it; nullopt when there is none (or `json` is not well-formed up to there).
  [[nodiscard]] std::optional<std::string_view> find(simdjson::padded_string_view json,
                                                     std::string_view pointer);

 private:
  // The parser is defined in json_literals.cpp only: its layout depends on simdjson's
  // compile definitions (SIMDJSON_THREADS_ENABLED), which the core's sources get and a
  // file that includes this header without linking simdjson (a test) does not; two
  // layouts of one class in one program corrupt it.
  struct Parser;
  std::unique_ptr<Parser> parser_;
};

}  // namespace idem::detail
