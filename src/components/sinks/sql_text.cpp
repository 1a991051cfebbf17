#include "sinks/sql_text.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace idem::sinks::detail {

namespace {

bool name_start(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool name_char(char c) noexcept {
  return name_start(c) || (c >= '0' && c <= '9');
}

// The index just past the end of the literal, identifier or comment starting at `i`, or
// `i` when none starts there. Both dialects double a quote to escape it ('it''s'), which
// reads as two literals back to back: the same text comes out either way.
std::size_t skip_quoted(std::string_view s, std::size_t i) {
  const char c = s[i];
  if (c == '\'' || c == '"') {
    const std::size_t end = s.find(c, i + 1);
    return end == std::string_view::npos ? s.size() : end + 1;
  }
  if (c == '-' && i + 1 < s.size() && s[i + 1] == '-') {
    const std::size_t end = s.find('\n', i);
    return end == std::string_view::npos ? s.size() : end + 1;
  }
  if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
    const std::size_t end = s.find("*/", i + 2);
    return end == std::string_view::npos ? s.size() : end + 2;
  }
  return i;
}

}  // namespace

bool is_param_name(std::string_view name) noexcept {
  return !name.empty() && name_start(name[0]) && std::all_of(name.begin(), name.end(), name_char);
}

NamedSql positional_sql(std::string_view text) {
  NamedSql out;
  out.sql.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (const std::size_t end = skip_quoted(text, i); end != i) {
      out.sql.append(text.substr(i, end - i));
      i = end;
      continue;
    }
    if (text[i] != '$') {
      out.sql.push_back(text[i++]);
      continue;
    }
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (next >= '0' && next <= '9') {
      out.problem =
          "a positional parameter ($1, ...): write a named one ($amount) and declare it "
          "under params";
      return out;
    }
    if (!name_start(next)) {
      out.problem =
          "a dollar-quoted string ($$ ... $$) cannot be told from parameters; use a "
          "'...' literal";
      return out;
    }
    std::size_t end = i + 1;
    while (end < text.size() && name_char(text[end])) ++end;
    if (end < text.size() && text[end] == '$') {
      out.problem = fmt::format(
          "a dollar-quoted string ({}) cannot be told from parameters; use "
          "a '...' literal",
          text.substr(i, end + 1 - i));
      return out;
    }
    const std::string name(text.substr(i + 1, end - i - 1));
    auto at = std::find(out.names.begin(), out.names.end(), name);
    if (at == out.names.end()) at = out.names.insert(out.names.end(), name);
    fmt::format_to(std::back_inserter(out.sql), "${}", at - out.names.begin() + 1);
    i = end;
  }
  return out;
}

}  // namespace idem::sinks::detail
