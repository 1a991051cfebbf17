#include "stores/postgres/pg_connection.hpp"

#include <poll.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "stores/store_errors.hpp"

namespace idem::detail::pg {

namespace {

// Statements beyond this many distinct SQL texts run unprepared: a program that
// builds SQL dynamically must not grow a server-side cache without bound.
constexpr std::size_t kMaxCachedStatements = 1024;

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

// libpq's conninfo parser quotes the fragment it choked on, and for a URI that
// fragment can be the whole string, password included. Blank out every quoted part.
std::string redact_quoted(std::string_view message) {
  std::string out;
  bool quoted = false;
  for (const char c : message) {
    if (c == '"') {
      out += c;
      if (!quoted) out += "...";
      quoted = !quoted;
    } else if (!quoted) {
      out += c;
    }
  }
  return trim(std::move(out));
}

}  // namespace

bool ok_status(const PGresult* r) {
  if (r == nullptr) return false;
  const ExecStatusType s = PQresultStatus(r);
  return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

std::string sql_excerpt(std::string_view sql) {
  std::string out;
  bool space = false;
  for (const char c : sql) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
    if (out.size() >= 160) {
      out += "...";
      break;
    }
  }
  return out;
}

bool is_connection_sqlstate(std::string_view s) noexcept {
  // 08: connection exception. 57P01 admin_shutdown (pg_terminate_backend, fast
  // shutdown), 57P02 crash_shutdown, 57P03 cannot_connect_now, 57P04
  // database_dropped, 57P05 idle_session_timeout: the session is gone.
  return starts_with(s, "08") || starts_with(s, "57P");
}

ErrorCode classify_sqlstate(std::string_view s) noexcept {
  // One table for the code and for what the consumer makes of it (stores/store_errors.cpp,
  // docs/store-errors.md).
  return postgres_error_rule(s).code;
}

Connection::Connection(std::string_view conninfo_view, const StoreOptions& options) {
  const std::string conninfo(conninfo_view);
  char* parse_error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(conninfo.c_str(), &parse_error);
  if (parsed == nullptr) {
    const std::string why =
        parse_error != nullptr ? redact_quoted(parse_error) : std::string("out of memory");
    PQfreemem(parse_error);
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Postgres,
                fmt::format("postgres: invalid connection string ({}); the string is not shown "
                            "because it may contain a password",
                            why));
  }

  // Start from what the conninfo says, then add idem's defaults for the keys it
  // leaves unset: the URL is the operator's explicit choice and wins.
  std::vector<std::pair<std::string, std::string>> settings;
  for (const PQconninfoOption* o = parsed; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    settings.emplace_back(o->keyword, o->val);
    if (std::strcmp(o->keyword, "password") == 0) password_ = o->val;
  }
  PQconninfoFree(parsed);
  const auto find = [&](std::string_view key) -> std::string* {
    for (auto& [k, v] : settings) {
      if (k == key) return &v;
    }
    return nullptr;
  };
  const auto set_default = [&](const char* key, std::string value) {
    if (find(key) == nullptr) settings.emplace_back(key, std::move(value));
  };
  if (options.connect_timeout.count() > 0) {
    set_default("connect_timeout", std::to_string(options.connect_timeout.count()));
  }
  // Several hosts (`host=a,b`, `postgresql://a,b/db`): a cluster that fails over. idem
  // writes on every connection, so it must land on the primary: without this, libpq
  // takes the first host that answers, a standby as readily as the primary, and every
  // write there fails with 25006 while reconnecting finds the same standby again.
  const std::string* hosts = find("host");
  if (hosts == nullptr) hosts = find("hostaddr");
  several_hosts_ = hosts != nullptr && hosts->find(',') != std::string::npos;
  if (several_hosts_) set_default("target_session_attrs", "read-write");
  if (!options.application_name.empty()) {
    set_default("application_name", options.application_name);
  }
  // Text cells are handed out as UTF-8 whatever the database encoding is.
  set_default("client_encoding", "UTF8");
  // Without keepalives a COMMIT waiting on a server that vanished (host down,
  // cable pulled) blocks until the kernel gives up, which takes hours by default.
  set_default("keepalives", "1");
  set_default("keepalives_idle", "30");
  set_default("keepalives_interval", "10");
  set_default("keepalives_count", "3");
  if (options.statement_timeout.count() > 0) {
    // Added to any -c options the conninfo already carries.
    const std::string flag =
        fmt::format("-c statement_timeout={}", options.statement_timeout.count());
    if (std::string* existing = find("options")) {
      *existing += " " + flag;
    } else {
      settings.emplace_back("options", flag);
    }
  }

  std::vector<const char*> keys;
  std::vector<const char*> values;
  for (const auto& [k, v] : settings) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  // expand_dbname = 0: the conninfo was already expanded by PQconninfoParse, so a
  // dbname that merely looks like a conninfo is taken literally.
  conn_ = PQconnectdbParams(keys.data(), values.data(), 0);
  if (conn_ == nullptr) {
    throw Error(ErrorCode::Connection, ErrorSource::Postgres,
                "postgres: cannot connect: out of memory");
  }
  PQsetNoticeReceiver(conn_, &Connection::on_notice, this);
  if (PQstatus(conn_) != CONNECTION_OK) {
    const std::string message = fmt::format("postgres: cannot connect to {}: {}", describe(),
                                            scrub(trim(PQerrorMessage(conn_))));
    PQfinish(conn_);
    conn_ = nullptr;
    throw Error(ErrorCode::Connection, ErrorSource::Postgres, message);
  }
  // PRIMARY KEY on a partitioned table and DEFAULT partitions need PostgreSQL 11.
  if (PQserverVersion(conn_) < 110000) {
    const std::string message =
        fmt::format("postgres: {} runs server version {}; idem needs PostgreSQL 11 or later",
                    describe(), PQserverVersion(conn_));
    PQfinish(conn_);
    conn_ = nullptr;
    throw Error(ErrorCode::Schema, ErrorSource::Postgres, message);
  }
}

// Notices would go to stderr by default; a library must not write there, and
// the errors that matter reach the caller as results. One notice matters: a FATAL
// that arrives while no command runs (pg_terminate_backend, idle timeouts, server
// shutdown) is handed to the notice receiver, and it means the session is over.
void Connection::on_notice(void* self, const PGresult* notice) {
  const char* severity = PQresultErrorField(notice, PG_DIAG_SEVERITY_NONLOCALIZED);
  if (severity != nullptr &&
      (std::strcmp(severity, "FATAL") == 0 || std::strcmp(severity, "PANIC") == 0)) {
    static_cast<Connection*>(self)->server_ended_ = true;
  }
}

Connection::~Connection() {
  if (conn_ != nullptr) PQfinish(conn_);
}

std::string Connection::describe() const {
  const auto or_default = [](const char* v) {
    return (v != nullptr && *v != '\0') ? v : "(default)";
  };
  return fmt::format("host={} port={} dbname={} user={}", or_default(PQhost(conn_)),
                     or_default(PQport(conn_)), or_default(PQdb(conn_)), or_default(PQuser(conn_)));
}

std::string Connection::scrub(std::string message) const {
  if (password_.empty()) return message;
  std::size_t at = 0;
  while ((at = message.find(password_, at)) != std::string::npos) {
    message.replace(at, password_.size(), "***");
    at += 3;
  }
  return message;
}

bool Connection::poll_alive() noexcept {
  // Reads whatever arrived while we were idle, without blocking. A session the
  // server ended (pg_terminate_backend, idle timeouts, shutdown) has sent a FATAL
  // and closed the socket: the first read takes the FATAL (libpq hands it to the
  // notice receiver, since no command is running), the next one sees EOF and turns
  // the status BAD. Bounded, in case the server keeps sending notifications.
  // The FATAL can also be here before the EOF is: PQisBusy() parses what was read,
  // which hands an unsolicited FATAL to on_notice().
  for (int i = 0; i < 4; ++i) {
    if (server_ended_ || PQstatus(conn_) != CONNECTION_OK) return false;
    pollfd p{PQsocket(conn_), POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) break;  // nothing (more) to read
    if (PQconsumeInput(conn_) == 0) return false;
    (void)PQisBusy(conn_);
  }
  return !server_ended_ && PQstatus(conn_) == CONNECTION_OK;
}

bool Connection::needs_reset() const noexcept {
  return poisoned_ || server_ended_ || PQstatus(conn_) != CONNECTION_OK;
}

void Connection::reset() {
  // With several hosts PQreset tries them in order again, so a reconnect after a
  // failover lands on the new primary (target_session_attrs=read-write).
  PQreset(conn_);
  // A new session has none of the old one's prepared statements.
  ++generation_;
  poisoned_ = false;
  server_ended_ = false;
  if (PQstatus(conn_) != CONNECTION_OK) {
    throw Error(ErrorCode::Connection, ErrorSource::Postgres,
                fmt::format("postgres: reconnecting to {} failed: {}", describe(),
                            scrub(trim(PQerrorMessage(conn_)))));
  }
}

void Connection::ensure_ready() {
  if (!poll_alive() || needs_reset()) {
    reset();
    return;
  }
  switch (PQtransactionStatus(conn_)) {
    case PQTRANS_IDLE: return;
    case PQTRANS_INTRANS:
    case PQTRANS_INERROR: {
      // A transaction block someone opened through the native handle, or one
      // whose ROLLBACK was lost: end it so the new transaction starts clean.
      const Result r(PQexec(conn_, "ROLLBACK"));
      if (ok_status(r.get())) return;
      break;
    }
    case PQTRANS_ACTIVE:
    case PQTRANS_UNKNOWN: break;
  }
  reset();
}

Statement* Connection::statement(std::string_view sql) {
  if (const auto it = cache_.find(sql); it != cache_.end()) return it->second.get();
  if (cache_.size() >= kMaxCachedStatements) return nullptr;
  auto stmt = std::make_unique<Statement>();
  stmt->name = fmt::format("idem_s{}", ++next_statement_);
  stmt->sql = std::string(sql);
  Statement* raw = stmt.get();
  cache_.emplace(stmt->sql, std::move(stmt));
  return raw;
}

Reply Connection::exec(std::span<const Command> commands) {
  if (commands.size() != 1 ||
      (commands[0].stmt != nullptr && commands[0].stmt->prepared_generation != generation_)) {
    return exec_pipelined(commands);
  }
  const Command& c = commands[0];
  Reply reply;
  if (c.stmt != nullptr) {
    reply.result.reset(PQexecPrepared(conn_, c.stmt->name.c_str(), c.params.count, c.params.values,
                                      c.params.lengths, c.params.formats, c.result_format));
  } else {
    const std::string text(c.sql);
    reply.result.reset(PQexecParams(conn_, text.c_str(), c.params.count, nullptr, c.params.values,
                                    c.params.lengths, c.params.formats, c.result_format));
  }
  if (ok_status(reply.result.get())) reply.done = 1;
  return reply;
}

Result Connection::next_pipeline_result() {
  // One extended-protocol command yields exactly one result followed by a null.
  // Should a broken connection produce more, keep the first and drain the rest,
  // with a bound so that no libpq state can make this loop forever.
  Result first(PQgetResult(conn_));
  if (first == nullptr) return first;
  for (int i = 0; i < 64; ++i) {
    PGresult* more = PQgetResult(conn_);
    if (more == nullptr) return first;
    PQclear(more);
  }
  poisoned_ = true;
  return first;
}

// Pipeline mode (libpq 14+) sends BEGIN, PREPARE, DESCRIBE and EXECUTE back to
// back and waits once, so a transaction's first statement costs one round trip
// instead of two (three on a statement's first use in a session).
//
// Measured (loopback TCP, PostgreSQL 15, 2 shared cores, medians of interleaved
// runs), one event per transaction:
//   BEGIN; mark; COMMIT as three round trips (raw libpq)   10,000-10,500 tx/s
//   [BEGIN + mark] pipelined; COMMIT (raw libpq)           14,000-14,200 tx/s
//   idem: begin(); mark_processed(); commit()              13,800-14,100 tx/s
//   with one UPDATE as the effect: raw 4 round trips 7,700 tx/s, idem 9,000-9,600 tx/s
// so the lazy BEGIN is kept. The transaction also defers SAVEPOINT and RELEASE
// SAVEPOINT the same way (postgres_store.cpp, "Lazy savepoints"), and the statements of
// Transaction::execute_deferred: they all ride ahead of the next synchronous statement
// in its pipeline. A synchronous statement's error reaches the caller before it sends
// the next one.
//
// Deadlock safety: in blocking mode libpq could stall if the server filled our
// receive buffer while we were still sending a long pipeline. libpq prevents it: when
// a blocking send cannot proceed, pqSendSome() reads what the server sent into libpq's
// input buffer before waiting again (fe-misc.c), so the server is never blocked on us.
Reply Connection::exec_pipelined(std::span<const Command> commands) {
  Reply reply;
  if (commands.empty()) return reply;
  if (PQenterPipelineMode(conn_) != 1) return reply;  // connection bad or busy: null result

  // Statements prepared by this pipeline: a statement deferred many times is prepared
  // once (before its first use), and marked prepared only if that PREPARE succeeds.
  std::vector<Statement*>& preparing = preparing_;
  preparing.clear();
  std::vector<bool>& prepares = prepares_;  // per command: its PREPARE + DESCRIBE ride ahead
  prepares.assign(commands.size(), false);
  std::string text;
  bool sent = true;
  for (std::size_t i = 0; i < commands.size() && sent; ++i) {
    const Command& c = commands[i];
    Statement* stmt = c.stmt;
    if (stmt != nullptr && stmt->prepared_generation != generation_ &&
        std::find(preparing.begin(), preparing.end(), stmt) == preparing.end()) {
      preparing.push_back(stmt);
      prepares[i] = true;
      sent = PQsendPrepare(conn_, stmt->name.c_str(), stmt->sql.c_str(),
                           static_cast<int>(stmt->types.size()),
                           stmt->types.empty() ? nullptr : stmt->types.data()) == 1 &&
             PQsendDescribePrepared(conn_, stmt->name.c_str()) == 1;
      if (!sent) break;
    }
    if (stmt != nullptr) {
      sent = PQsendQueryPrepared(conn_, stmt->name.c_str(), c.params.count, c.params.values,
                                 c.params.lengths, c.params.formats, c.result_format) == 1;
    } else {
      text.assign(c.sql);
      sent = PQsendQueryParams(conn_, text.c_str(), c.params.count, nullptr, c.params.values,
                               c.params.lengths, c.params.formats, c.result_format) == 1;
    }
  }
  if (sent) sent = PQpipelineSync(conn_) == 1;
  if (!sent) {
    // Part of the pipeline may be queued; what the session did is unknown.
    poisoned_ = true;
    return reply;
  }

  Result first_error;
  bool failed = false;
  const auto note = [&](Result r) {
    if (failed) return;
    if (!ok_status(r.get())) {
      failed = true;
      first_error = std::move(r);
    }
  };
  Result last;
  for (std::size_t i = 0; i < commands.size() && PQstatus(conn_) == CONNECTION_OK; ++i) {
    if (prepares[i]) {
      Statement* stmt = commands[i].stmt;
      Result r = next_pipeline_result();
      if (ok_status(r.get())) stmt->prepared_generation = generation_;
      note(std::move(r));
      Result described = next_pipeline_result();
      if (ok_status(described.get())) stmt->param_count = PQnparams(described.get());
      note(std::move(described));
    }
    Result r = next_pipeline_result();
    if (!failed && ok_status(r.get())) ++reply.done;
    if (i + 1 == commands.size()) {
      last = std::move(r);
    } else {
      note(std::move(r));
    }
  }
  if (!failed && last == nullptr) failed = true;  // nothing came back: connection lost

  bool synced = false;
  if (PQstatus(conn_) == CONNECTION_OK) {
    const Result sync(PQgetResult(conn_));
    synced = sync != nullptr && PQresultStatus(sync.get()) == PGRES_PIPELINE_SYNC;
  }
  if (!synced || PQexitPipelineMode(conn_) != 1) poisoned_ = true;

  reply.result = failed ? std::move(first_error) : std::move(last);
  return reply;
}

Result Connection::exec_simple(const char* sql) {
  return Result(PQexec(conn_, sql));
}

Failure Connection::classify(const PGresult* result) const {
  Failure f;
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const bool connection_ok = PQstatus(conn_) == CONNECTION_OK;
  if (state == nullptr || *state == '\0') {
    // An error libpq made up itself: "server closed the connection unexpectedly",
    // "no connection to the server", "could not send data to server", ...
    const char* text = result != nullptr ? PQresultErrorMessage(result) : "";
    if (text == nullptr || *text == '\0') text = PQerrorMessage(conn_);
    f.code = connection_ok ? ErrorCode::Query : ErrorCode::Connection;
    f.message = scrub(trim(text != nullptr && *text != '\0' ? text : "no result from the server"));
    if (!connection_ok) f.message += fmt::format(" ({})", describe());
    return f;
  }
  f.sqlstate = state;
  f.code = connection_ok ? classify_sqlstate(f.sqlstate) : ErrorCode::Connection;
  // 25006 read_only_sql_transaction with several hosts named: this server was the
  // primary and is read-only now (a demoted primary, a standby after a failover), and
  // another of the named hosts takes the writes. That is a reason to reconnect, not a
  // fault of the statement: the session is replaced before the next transaction, and
  // the caller redoes the work there (or sees a COMMIT in doubt, as for any lost
  // connection). With one host, nothing else can take the writes: permanent, as before.
  if (several_hosts_ && f.sqlstate == "25006") {
    f.code = ErrorCode::Connection;
    poisoned_ = true;
  }
  // 08P01 protocol_violation on a connection that is still fine is the server
  // rejecting our Bind: the number of parameters does not match the statement.
  if (connection_ok && f.sqlstate == "08P01") f.code = ErrorCode::InvalidArgument;
  // The primary message only: DETAIL quotes row values ("Key (id)=(42) already
  // exists"), and messages end up in logs and DLQ headers.
  const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
  const char* severity = PQresultErrorField(result, PG_DIAG_SEVERITY_NONLOCALIZED);
  f.message = fmt::format("{}: {} (SQLSTATE {})", severity != nullptr ? severity : "ERROR",
                          scrub(trim(primary != nullptr ? primary : "")), f.sqlstate);
  if (f.code == ErrorCode::Connection && f.sqlstate == "25006") {
    f.message += fmt::format(" on {}: read-only now; reconnecting to the host that takes writes",
                             describe());
  }
  return f;
}

void Connection::fail(const PGresult* result, std::string_view what) const {
  Failure f = classify(result);
  throw Error(f.code, ErrorSource::Postgres,
              fmt::format("postgres: {}: {}", sql_excerpt(what), f.message), std::move(f.sqlstate));
}

}  // namespace idem::detail::pg
