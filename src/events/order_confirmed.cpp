// STUB: replaced by the real implementation.
#include "idem/events/order_confirmed.hpp"
#include <stdexcept>
namespace idem {
Validated<OrderConfirmed> parse_order_confirmed(std::string_view, const ParseLimits&) {
  return ValidationError{"", ValidationReason::InvalidJson, "not implemented"};
}
std::string to_json(const OrderConfirmed&) { throw std::logic_error("not implemented"); }
}  // namespace idem
