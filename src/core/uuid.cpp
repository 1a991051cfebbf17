// STUB: replaced by the real implementation.
#include "idem/uuid.hpp"
#include <stdexcept>
namespace idem {
struct UuidV7Generator::State {};
std::optional<Uuid> Uuid::parse(std::string_view) noexcept { return std::nullopt; }
std::string Uuid::to_string() const { throw std::logic_error("not implemented"); }
void Uuid::format_to(char*) const noexcept {}
bool Uuid::is_v7() const noexcept { return false; }
bool Uuid::is_nil() const noexcept { return true; }
std::chrono::sys_time<std::chrono::milliseconds> Uuid::timestamp() const noexcept { return {}; }
Uuid Uuid::lower_bound_for(std::chrono::sys_time<std::chrono::milliseconds>) noexcept { return {}; }
UuidV7Generator::UuidV7Generator(const Clock& clock) : clock_(clock) {}
UuidV7Generator::~UuidV7Generator() = default;
Uuid UuidV7Generator::next() { throw std::logic_error("not implemented"); }
Uuid new_uuid_v7() { throw std::logic_error("not implemented"); }
}  // namespace idem
std::size_t std::hash<idem::Uuid>::operator()(const idem::Uuid&) const noexcept { return 0; }
