#include "support/postgres_test_db.hpp"

#include <libpq-fe.h>
#include <unistd.h>

#include <mutex>
#include <random>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace idem::test {

namespace {

// One admin connection per process, used to create the databases and, at exit,
// to drop them again.
class DatabaseFactory {
 public:
  DatabaseFactory() : owner_pid_(::getpid()) {}
  DatabaseFactory(const DatabaseFactory&) = delete;
  DatabaseFactory& operator=(const DatabaseFactory&) = delete;

  ~DatabaseFactory() {
    // A forked child that exits runs this destructor too: it must not drop the
    // databases its parent is still using.
    if (::getpid() != owner_pid_ || conn_ == nullptr) return;
    if (PQstatus(conn_) == CONNECTION_OK) {
      for (const std::string& name : created_) {
        PGresult* r =
            PQexec(conn_, fmt::format("DROP DATABASE IF EXISTS {} WITH (FORCE)", name).c_str());
        PQclear(r);  // best effort: the throwaway cluster is removed anyway
      }
    }
    PQfinish(conn_);
  }

  std::string create(const std::string& dsn) {
    const std::lock_guard lock(mutex_);
    if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
      if (conn_ != nullptr) PQfinish(conn_);
      conn_ = PQconnectdb(dsn.c_str());
      if (PQstatus(conn_) != CONNECTION_OK) {
        const std::string why = PQerrorMessage(conn_);
        PQfinish(conn_);
        conn_ = nullptr;
        throw std::runtime_error("fresh_postgres_url: cannot connect with IDEM_TEST_PG_DSN: " +
                                 why);
      }
      PQsetNoticeProcessor(
          conn_, [](void*, const char*) {}, nullptr);
    }
    const std::string name = fmt::format("idem_t_{:012x}", random_() & 0xFFFFFFFFFFFFULL);
    // template0: nobody is ever connected to it, so concurrent test processes can
    // all copy it at once (copying template1 fails while someone is connected to it).
    PGresult* r = PQexec(conn_, fmt::format("CREATE DATABASE {} TEMPLATE template0", name).c_str());
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    const std::string why = ok ? "" : PQresultErrorMessage(r);
    PQclear(r);
    if (!ok) throw std::runtime_error("fresh_postgres_url: CREATE DATABASE " + name + ": " + why);
    created_.push_back(name);
    return postgres_url_with_dbname(dsn, name);
  }

 private:
  std::mutex mutex_;
  PGconn* conn_ = nullptr;
  std::vector<std::string> created_;
  std::mt19937_64 random_{std::random_device{}()};
  pid_t owner_pid_;
};

DatabaseFactory& factory() {
  static DatabaseFactory instance;  // destroyed at exit: drops the databases
  return instance;
}

}  // namespace

std::string postgres_url_with_dbname(std::string_view dsn, std::string_view dbname) {
  for (const std::string_view scheme : {"postgresql://", "postgres://"}) {
    if (dsn.substr(0, scheme.size()) != scheme) continue;
    // libpq ends the authority at the first '/' (or '?'); the path up to '?' is the dbname.
    const std::size_t authority_end = dsn.find_first_of("/?", scheme.size());
    if (authority_end == std::string_view::npos) return fmt::format("{}/{}", dsn, dbname);
    const std::size_t query = dsn.find('?', authority_end);
    const std::string_view rest = query == std::string_view::npos ? "" : dsn.substr(query);
    return fmt::format("{}/{}{}", dsn.substr(0, authority_end), dbname, rest);
  }
  // key=value form: a later keyword overrides an earlier one.
  return fmt::format("{} dbname={}", dsn, dbname);
}

std::string fresh_postgres_url() {
  auto dsn = postgres_dsn();
  if (!dsn) throw std::runtime_error("fresh_postgres_url: IDEM_TEST_PG_DSN is not set");
  // Also accept open_store's "postgresql:key=value" spelling.
  if (dsn->rfind("postgresql:", 0) == 0 && dsn->rfind("postgresql://", 0) != 0) {
    dsn = dsn->substr(std::string_view("postgresql:").size());
  }
  std::string url = factory().create(*dsn);
  // A key=value conninfo becomes an open_store URL through the "postgresql:" prefix.
  if (url.rfind("postgres", 0) != 0) url = "postgresql:" + url;
  return url;
}

}  // namespace idem::test
