// STUB: replaced by the real implementation.
#include "idem/error.hpp"
#include "idem/stores/sqlite.hpp"
namespace idem {
std::unique_ptr<Store> make_sqlite_store(std::string_view, const StoreOptions&) {
  throw Error(ErrorCode::Internal, ErrorSource::Sqlite, "not implemented");
}
sqlite3* sqlite_native_handle(Store&) { throw Error(ErrorCode::Internal, ErrorSource::Sqlite, "not implemented"); }
}  // namespace idem
