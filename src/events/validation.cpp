#include "idem/events/validation.hpp"

namespace idem {

// These names go into DLQ headers and metric labels, so they are part of the
// wire contract: never rename one, only add new ones.
std::string_view to_string(ValidationReason reason) noexcept {
  switch (reason) {
    case ValidationReason::TooLarge: return "too_large";
    case ValidationReason::InvalidUtf8: return "invalid_utf8";
    case ValidationReason::InvalidJson: return "invalid_json";
    case ValidationReason::DuplicateField: return "duplicate_field";
    case ValidationReason::Missing: return "missing";
    case ValidationReason::WrongType: return "wrong_type";
    case ValidationReason::NotUuid: return "not_uuid";
    case ValidationReason::NotUuidV7: return "not_uuid_v7";
    case ValidationReason::NotDecimal: return "not_decimal";
    case ValidationReason::NegativeAmount: return "negative_amount";
    case ValidationReason::TooManyFractionDigits: return "too_many_fraction_digits";
    case ValidationReason::OutOfRange: return "out_of_range";
    case ValidationReason::NotRfc3339: return "not_rfc3339";
    case ValidationReason::UnknownEventType: return "unknown_event_type";
    case ValidationReason::TooManyHeaders: return "too_many_headers";
    case ValidationReason::NotCloudEvent: return "not_cloud_event";
    case ValidationReason::SchemaViolation: return "schema_violation";
    case ValidationReason::UrlSegment: return "url_segment";
  }
  return "unknown";  // only for a value cast from an out-of-range integer
}

std::string shown_in_message(std::string_view text) {
  std::string out;
  for (const char c : text.substr(0, 64))
    out.push_back(static_cast<unsigned char>(c) < 0x20 ? '?' : c);
  if (text.size() > 64) out += "...";
  return out;
}

}  // namespace idem
