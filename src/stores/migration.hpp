#pragma once
// A versioned schema migration, embedded from sql/<backend>/NNNN_name.sql at build time.
#include <vector>

namespace idem::detail {

struct Migration {
  int version;
  const char* name;
  const char* sql;
};

namespace postgres_sql {
const std::vector<Migration>& migrations();
}
namespace sqlite_sql {
const std::vector<Migration>& migrations();
}

}  // namespace idem::detail
