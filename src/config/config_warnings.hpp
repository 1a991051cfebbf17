#pragma once
// Checks across keys that are each valid but together can cost an effect; the loader
// stores the result in Config::warnings and `idem config check` prints it.
#include <string>
#include <vector>

#include "idem/config.hpp"

namespace idem::detail {

[[nodiscard]] std::vector<std::string> config_warnings(const Config& config);

}  // namespace idem::detail
