// STUB: replaced by the real implementation.
#include "idem/events/validation.hpp"
namespace idem {
std::string_view to_string(ValidationReason) noexcept { return "unknown"; }
}  // namespace idem
