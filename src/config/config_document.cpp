// The one place idem parses its TOML file (toml++, header-only, from Debian).
#include "idem/config_document.hpp"

#include <fstream>
#include <iterator>

#include <fmt/format.h>

namespace idem {

namespace {

/// The line (1-based) of the first byte outside ASCII, or 0. toml++ 3.3.0 (Debian 12)
/// reaches __builtin_unreachable() on some non-ASCII bytes where a key is expected (found
/// by fuzz/config_fuzz.cpp; its reproducers are in fuzz/corpus/config/): undefined
/// behaviour on input a user may write. idem's keys and values are ASCII, and any other
/// character can still be written as a \uXXXX escape inside a string, so such a file is
/// refused with a clear message before toml++ sees it.
std::size_t first_non_ascii_line(std::string_view text) noexcept {
  std::size_t line = 1;
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return line;
    if (c == '\n') ++line;
  }
  return 0;
}

}  // namespace

std::shared_ptr<const ConfigDocument> ConfigDocument::read(const std::string& path,
                                                           std::string& problem) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problem = "cannot read TOML file: it does not exist or is not readable";
    return nullptr;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (const std::size_t line = first_non_ascii_line(text); line > 0) {
    problem = fmt::format(
        "cannot parse TOML file (line {}): a byte outside ASCII; write such characters as "
        "\\uXXXX escapes inside a quoted string",
        line);
    return nullptr;
  }
  try {
    return std::make_shared<const ConfigDocument>(path, toml::parse(text, path));
  } catch (const toml::parse_error& e) {
    const auto line = e.source().begin.line;
    problem = line > 0 ? fmt::format("cannot parse TOML file (line {}): {}", line, e.description())
                       : fmt::format("cannot read TOML file: {}", e.description());
    return nullptr;
  }
}

}  // namespace idem
