#pragma once
// Reading a libpq connection string without connecting, for configuration checks.
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace idem::detail::pg {

/// The parameters a libpq connection string or URI sets (keyword -> value; unset and
/// empty ones left out), as libpq itself parses it; nullopt when libpq cannot parse it.
/// libpq's message is dropped: it may quote the string, password included.
[[nodiscard]] std::optional<std::map<std::string, std::string>> parse_conninfo(
    std::string_view conninfo);

}  // namespace idem::detail::pg
