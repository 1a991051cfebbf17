#pragma once
// A check every reader of idem's TOML file runs before toml++ sees the text: the loader
// (config_loader.cpp) and the components that read their own table of the same file.
#include <cstddef>
#include <string_view>

namespace idem::detail {

/// The line (1-based) of the first byte outside ASCII, or 0. toml++ 3.3.0 (Debian 12)
/// reaches __builtin_unreachable() on some non-ASCII bytes where a key is expected (found
/// by fuzz/config_fuzz.cpp; its reproducers are in fuzz/corpus/config/): undefined
/// behaviour on input a user may write. idem's keys and values are ASCII, and any other
/// character can still be written as a \uXXXX escape inside a string, so such a file is
/// refused with a clear message before toml++ sees it.
[[nodiscard]] inline std::size_t first_non_ascii_line(std::string_view text) noexcept {
  std::size_t line = 1;
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return line;
    if (c == '\n') ++line;
  }
  return 0;
}

}  // namespace idem::detail
