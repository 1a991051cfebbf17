#pragma once
// The parser state behind EventReader, JsonDocument and the JsonValues they give: the
// DOM parser, the literal finder and the document's padded copy, reused parse after
// parse. Private to the core: only its sources see simdjson's layout.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <simdjson.h>

#include "events/json_literals.hpp"
#include "idem/events/event_reader.hpp"

namespace idem::detail {

struct JsonSource {
  simdjson::dom::parser parser;
  JsonLiterals literals;
  std::string buffer;  // the document's bytes plus simdjson's padding
  std::size_t length = 0;

  /// Copies `bytes` into the buffer and parses them (counted: json_documents_parsed()).
  [[nodiscard]] simdjson::error_code parse(std::string_view bytes, simdjson::dom::element& root);
  /// The text as written of the value at `pointer` in the last document parsed.
  [[nodiscard]] std::optional<std::string_view> literal(std::string_view pointer);

  /// A JsonValue of `element`, found at `pointer` in this source's document.
  [[nodiscard]] JsonValue value(simdjson::dom::element element, std::string pointer);
  [[nodiscard]] static simdjson::dom::element element_of(const JsonValue& value) noexcept;
};

/// Appends `name` as one token of a JSON pointer (RFC 6901: '~' is ~0, '/' is ~1).
void append_token(std::string& out, std::string_view name);

}  // namespace idem::detail
