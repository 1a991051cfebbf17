#pragma once
// The console's static files, embedded at build time (cmake/embed_assets.cmake).
#include <span>
#include <string_view>

namespace idem::console {

struct Asset {
  std::string_view path;  ///< URL path, e.g. "/app.js"
  std::string_view content_type;
  std::string_view body;
};

[[nodiscard]] std::span<const Asset> assets();

}  // namespace idem::console
