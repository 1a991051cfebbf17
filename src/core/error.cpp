#include "idem/error.hpp"

namespace idem {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::InvalidArgument: return "invalid_argument";
    case ErrorCode::Connection: return "connection";
    case ErrorCode::TransactionAborted: return "transaction_aborted";
    case ErrorCode::Constraint: return "constraint";
    case ErrorCode::Query: return "query";
    case ErrorCode::InDoubt: return "in_doubt";
    case ErrorCode::Timeout: return "timeout";
    case ErrorCode::Schema: return "schema";
    case ErrorCode::Internal: return "internal";
  }
  return "unknown";
}

std::string_view to_string(ErrorScope scope) noexcept {
  switch (scope) {
    case ErrorScope::Statement: return "statement";
    case ErrorScope::Transaction: return "transaction";
    case ErrorScope::Connection: return "connection";
    case ErrorScope::InDoubt: return "in_doubt";
    case ErrorScope::Permanent: return "permanent";
  }
  return "unknown";
}

std::string_view to_string(ErrorSource source) noexcept {
  switch (source) {
    case ErrorSource::Config: return "config";
    case ErrorSource::Kafka: return "kafka";
    case ErrorSource::Postgres: return "postgres";
    case ErrorSource::Sqlite: return "sqlite";
    case ErrorSource::Http: return "http";
    case ErrorSource::Event: return "event";
    case ErrorSource::Internal: return "internal";
  }
  return "unknown";
}

}  // namespace idem
