// STUB: replaced by the real implementation.
#include "idem/error.hpp"
#include "idem/stores/postgres.hpp"
namespace idem {
std::unique_ptr<Store> make_postgres_store(std::string_view, const StoreOptions&) {
  throw Error(ErrorCode::Internal, ErrorSource::Postgres, "not implemented");
}
pg_conn* postgres_native_handle(Store&) { throw Error(ErrorCode::Internal, ErrorSource::Postgres, "not implemented"); }
}  // namespace idem
