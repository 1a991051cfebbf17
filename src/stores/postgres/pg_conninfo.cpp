#include "stores/postgres/pg_conninfo.hpp"

#include <libpq-fe.h>

namespace idem::detail::pg {

std::optional<std::map<std::string, std::string>> parse_conninfo(std::string_view conninfo) {
  const std::string text(conninfo);
  char* err = nullptr;
  PQconninfoOption* options = PQconninfoParse(text.c_str(), &err);
  if (options == nullptr) {
    if (err != nullptr) PQfreemem(err);
    return std::nullopt;
  }
  std::map<std::string, std::string> params;
  for (const PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val != nullptr && *o->val != '\0') params[o->keyword] = o->val;
  }
  PQconninfoFree(options);
  return params;
}

}  // namespace idem::detail::pg
