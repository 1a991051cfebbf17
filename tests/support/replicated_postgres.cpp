#include "support/replicated_postgres.hpp"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "idem/devtools/child_process.hpp"
#include "support/ports.hpp"
#include "support/test_env.hpp"
#include "support/wait.hpp"

namespace idem::test {

namespace {

using namespace std::chrono_literals;

/// The pid in the first line of a postmaster.pid, or 0.
pid_t postmaster_pid(const std::string& data_dir) {
  std::ifstream in(data_dir + "/postmaster.pid");
  long pid = 0;
  return (in >> pid) ? static_cast<pid_t>(pid) : 0;
}

/// The parent pid and state of `pid` from /proc, or nullopt when it is gone.
struct ProcState {
  pid_t ppid = 0;
  char state = '?';
};
std::optional<ProcState> proc_state(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const auto close = line.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  ProcState s;
  long ppid = 0;
  rest >> s.state >> ppid;
  s.ppid = static_cast<pid_t>(ppid);
  return s;
}

bool gone(pid_t pid) {
  const auto s = proc_state(pid);
  return !s || s->state == 'Z';  // a zombie runs nothing any more (and is not ours to reap)
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    if (const auto s = proc_state(pid); s && s->ppid == parent) out.push_back(pid);
  }
  return out;
}

std::string tail_of(const std::string& path, std::size_t bytes = 3000) {
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

}  // namespace

std::optional<PostgresBinaries> postgres_binaries() {
  const auto bin = env("IDEM_TEST_PG_BIN");
  if (!bin) return std::nullopt;
  return PostgresBinaries{*bin, env("IDEM_TEST_PG_RUN_AS").value_or("")};
}

ReplicatedPostgres::ReplicatedPostgres(PostgresBinaries binaries, ReplicatedPostgresOptions options)
    : binaries_(std::move(binaries)), options_(std::move(options)) {
  // Short: the unix sockets live here too (about 100 bytes at most for their paths).
  std::string pattern = "/tmp/idem-failover.XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::runtime_error("replicated postgres: mkdtemp failed");
  }
  dir_ = pattern;
  log_ = dir_ + "/tools.log";
  if (!binaries_.run_as.empty()) {
    const passwd* user = ::getpwnam(binaries_.run_as.c_str());
    if (user == nullptr || ::chown(dir_.c_str(), user->pw_uid, user->pw_gid) != 0) {
      fail("cannot hand the directory to user " + binaries_.run_as);
    }
  }
  nodes_[0] = Node{"node_a", dir_ + "/node_a", unused_listen_port(), false};
  nodes_[1] = Node{"node_b", dir_ + "/node_b", unused_listen_port(), false};
  Node& primary = nodes_[0];
  run_tool("initdb",
           {"-D", primary.dir, "-U", "postgres", "-E", "UTF8", "--no-locale", "--auth-local=trust",
            "--auth-host=trust", "--no-sync"},
           60s);
  // The same settings on both nodes (pg_basebackup copies them): either may be primary.
  // Only loopback and the private socket are reachable, so trust is safe here.
  std::ofstream(primary.dir + "/postgresql.conf", std::ios::app) << fmt::format(
      "\n# written by tests/support/replicated_postgres.cpp\n"
      "listen_addresses = '127.0.0.1'\n"
      "unix_socket_directories = '{}'\n"
      "wal_level = replica\n"
      "max_wal_senders = 8\n"
      "hot_standby = on\n"
      // A held-back standby waits on a stopped walsender without either side giving up.
      "wal_sender_timeout = 0\n"
      "wal_receiver_timeout = 0\n"
      "fsync = {}\n"
      "synchronous_commit = on\n"
      "synchronous_standby_names = '{}'\n"
      "max_connections = 100\n"
      "shared_buffers = 64MB\n"
      "log_min_messages = warning\n",
      dir_, options_.fsync ? "on" : "off", options_.synchronous ? "*" : "");
  start(primary, true);
  query_on(primary, "postgres", "CREATE DATABASE " + options_.database);
  make_standby_of(nodes_[1], primary);
}

ReplicatedPostgres::~ReplicatedPostgres() {
  for (Node& node : nodes_) {
    try {
      kill_node(node);
    } catch (...) {
    }
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

void ReplicatedPostgres::fail(const std::string& what) const {
  throw std::runtime_error(
      fmt::format("replicated postgres: {}; end of {}:\n{}", what, log_, tail_of(log_)));
}

void ReplicatedPostgres::run_tool(const std::string& program, const std::vector<std::string>& args,
                                  std::chrono::seconds timeout) const {
  // From a directory the server user can read (initdb and pg_ctl complain otherwise),
  // with everything it prints appended to the log.
  std::vector<std::string> argv = {"-c", "cd \"$0\" && exec \"$@\" >>\"$IDEM_TOOL_LOG\" 2>&1",
                                   dir_};
  if (!binaries_.run_as.empty()) {
    for (const char* a : {"runuser", "-u"}) argv.emplace_back(a);
    argv.push_back(binaries_.run_as);
    argv.emplace_back("--");
  }
  argv.push_back(binaries_.bin_dir + "/" + program);
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess tool = ChildProcess::spawn("/bin/sh", argv, {{"IDEM_TOOL_LOG", log_}});
  const int status = tool.wait(timeout);
  if (status != 0) fail(fmt::format("{} exited with status {}", program, status));
}

void ReplicatedPostgres::write_owned_file(const std::string& path, const std::string& text) const {
  std::ofstream(path) << text;
  if (!binaries_.run_as.empty()) {
    const passwd* user = ::getpwnam(binaries_.run_as.c_str());
    if (user == nullptr || ::chown(path.c_str(), user->pw_uid, user->pw_gid) != 0) {
      fail("cannot hand " + path + " to user " + binaries_.run_as);
    }
  }
}

void ReplicatedPostgres::start(Node& node, bool wait) {
  // A SIGKILLed postmaster leaves its socket's lock file behind, naming its pid. The
  // server refuses to start while that pid names a live process it may not signal, and
  // on a busy machine the pid is soon reused: the node is down here, so the file is stale.
  std::error_code ignored;
  std::filesystem::remove(fmt::format("{}/.s.PGSQL.{}.lock", dir_, node.port), ignored);
  std::filesystem::remove(fmt::format("{}/.s.PGSQL.{}", dir_, node.port), ignored);
  run_tool("pg_ctl",
           {"-D", node.dir, "-l", dir_ + "/" + node.name + ".log", "-o",
            fmt::format("-p {}", node.port), wait ? "-w" : "-W", "-t", "60", "start"},
           90s);
  node.running = true;
}

void ReplicatedPostgres::make_standby_of(Node& standby, const Node& primary) {
  std::error_code ignored;
  std::filesystem::remove_all(standby.dir, ignored);
  // --no-sync: a killed process loses nothing that reached the kernel (see fsync above).
  run_tool("pg_basebackup",
           {"-h", "127.0.0.1", "-p", std::to_string(primary.port), "-U", "postgres", "-D",
            standby.dir, "-X", "stream", "-c", "fast", "--no-sync"},
           120s);
  write_owned_file(standby.dir + "/standby.signal", "");
  write_owned_file(
      standby.dir + "/postgresql.auto.conf",
      fmt::format("primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={}'\n",
                  primary.port, standby.name));
  // Not -w: a standby takes a while to accept connections, and what counts is that it
  // streams from the primary.
  start(standby, false);
  wait_streaming(standby, 60s);
}

void ReplicatedPostgres::wait_streaming(const Node& standby, std::chrono::seconds timeout) const {
  const Node& primary = nodes_[primary_];
  const std::string sql = fmt::format(
      "SELECT count(*) FROM pg_stat_replication WHERE application_name = '{}' AND "
      "state = 'streaming'",
      standby.name);
  const bool streaming = eventually(
      [&] { return query_on(primary, "postgres", sql) == std::vector<std::string>{"1"}; }, timeout,
      20ms);
  if (!streaming) {
    fail(fmt::format("{} does not stream from {}; end of {}.log:\n{}", standby.name, primary.name,
                     standby.name, tail_of(dir_ + "/" + standby.name + ".log")));
  }
}

std::string ReplicatedPostgres::url() const {
  return fmt::format(
      "postgresql:host=127.0.0.1,127.0.0.1 port={},{} dbname={} user=postgres "
      "target_session_attrs=read-write",
      nodes_[0].port, nodes_[1].port, options_.database);
}

std::string ReplicatedPostgres::primary_url() const {
  return fmt::format("postgresql://postgres@127.0.0.1:{}/{}", nodes_[primary_].port,
                     options_.database);
}

std::vector<std::string> ReplicatedPostgres::node_names() const {
  return {nodes_[0].name, nodes_[1].name};
}

const std::string& ReplicatedPostgres::standby_name() const {
  return nodes_[1 - primary_].name;
}

std::vector<std::string> ReplicatedPostgres::query(const std::string& sql) const {
  return query_on(nodes_[primary_], options_.database, sql);
}

std::vector<std::string> ReplicatedPostgres::query_on(const Node& node, const std::string& database,
                                                      const std::string& sql) const {
  const std::unique_ptr<PGconn, decltype(&PQfinish)> conn(
      PQconnectdb(fmt::format("host=127.0.0.1 port={} dbname={} user=postgres connect_timeout=10",
                              node.port, database)
                      .c_str()),
      &PQfinish);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    throw std::runtime_error(fmt::format("replicated postgres: cannot connect to {}: {}", node.name,
                                         PQerrorMessage(conn.get())));
  }
  const std::unique_ptr<PGresult, decltype(&PQclear)> r(PQexec(conn.get(), sql.c_str()), &PQclear);
  const ExecStatusType status = PQresultStatus(r.get());
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
    throw std::runtime_error(fmt::format("replicated postgres: {} on {}: {}", sql, node.name,
                                         PQresultErrorMessage(r.get())));
  }
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(PQntuples(r.get())));
  for (int i = 0; i < PQntuples(r.get()); ++i) out.emplace_back(PQgetvalue(r.get(), i, 0));
  return out;
}

void ReplicatedPostgres::hold_back_standby() {
  const auto pids =
      query_on(nodes_[primary_], "postgres",
               fmt::format("SELECT pid FROM pg_stat_replication WHERE application_name = '{}'",
                           standby_name()));
  if (pids.size() != 1) fail("no walsender serves " + standby_name());
  if (::kill(static_cast<pid_t>(std::stol(pids[0])), SIGSTOP) != 0) {
    fail(fmt::format("SIGSTOP of walsender {} failed (errno {})", pids[0], errno));
  }
}

void ReplicatedPostgres::kill_node(Node& node) {
  if (!node.running) return;
  node.running = false;
  const pid_t postmaster = postmaster_pid(node.dir);
  if (postmaster <= 0 || gone(postmaster)) return;
  // Stopped first, the postmaster forks no new backend while its children are found
  // and killed; a child left alive would serve its client as if nothing had happened.
  ::kill(postmaster, SIGSTOP);
  std::vector<pid_t> victims = children_of(postmaster);
  for (const pid_t child : victims) ::kill(child, SIGKILL);
  ::kill(postmaster, SIGKILL);
  victims.push_back(postmaster);
  const bool dead = eventually(
      [&] {
        for (const pid_t pid : victims) {
          if (!gone(pid)) return false;
        }
        return true;
      },
      30s, 5ms);
  if (!dead) fail(node.name + ": processes still alive after SIGKILL");
}

void ReplicatedPostgres::crash_primary() {
  kill_node(nodes_[primary_]);
}

void ReplicatedPostgres::promote_standby() {
  Node& standby = nodes_[1 - primary_];
  run_tool("pg_ctl", {"-D", standby.dir, "-w", "-t", "60", "promote"}, 90s);
  primary_ = 1 - primary_;
  ++promotions_;
}

void ReplicatedPostgres::rebuild_standby() {
  Node& old_primary = nodes_[1 - primary_];
  kill_node(old_primary);
  make_standby_of(old_primary, nodes_[primary_]);
}

}  // namespace idem::test
