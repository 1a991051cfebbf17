// STUB: replaced by the real implementation.
#include "idem/timestamp.hpp"
#include <stdexcept>
namespace idem {
std::optional<Timestamp> parse_rfc3339(std::string_view) noexcept { return std::nullopt; }
std::string format_rfc3339(Timestamp) { throw std::logic_error("not implemented"); }
}  // namespace idem
