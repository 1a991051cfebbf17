#pragma once
// A route's statement as written (`$amount`, named) turned into the form the stores run
// (`$1`, positional). Named parameters keep a file readable and make the binding
// explicit: every value is bound, none is spliced into the text.
#include <string>
#include <string_view>
#include <vector>

namespace idem::sinks::detail {

struct NamedSql {
  std::string sql;                 ///< with `$1`, `$2`, ... in order of first use
  std::vector<std::string> names;  ///< the name of `$1`, `$2`, ...
  std::string problem;             ///< empty when the text could be read
};

/// Replaces each `$name` outside string literals, quoted identifiers and comments by a
/// positional placeholder; a name used twice gets the same one. Refuses positional
/// placeholders (`$1`: name the parameter instead) and dollar-quoted strings (`$$`,
/// `$tag$`), whose bodies it could not tell from parameters.
[[nodiscard]] NamedSql positional_sql(std::string_view text);

/// True for a parameter name: a letter or `_`, then letters, digits or `_`.
[[nodiscard]] bool is_param_name(std::string_view name) noexcept;

}  // namespace idem::sinks::detail
