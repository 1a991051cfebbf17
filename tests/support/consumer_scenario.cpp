#include "support/consumer_scenario.hpp"
#include "support/mock_group.hpp"

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "idem/reference/order_confirmed.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/ports.hpp"
#include "support/test_env.hpp"

namespace idem::test {

using namespace std::chrono_literals;

// --- dev broker ----------------------------------------------------------------

DevBrokerProcess::DevBrokerProcess(const std::string& cli_path)
    : process_(ChildProcess::spawn(cli_path, {"dev-broker"})) {
  auto line = process_.read_line(30s);
  if (!line || line->empty()) throw std::runtime_error("idem dev-broker printed no bootstrap line");
  bootstrap_ = *line;
}

std::string DevBrokerProcess::control(const std::string& command) {
  process_.write_line(command);
  auto line = process_.read_line(30s);
  if (!line) throw std::runtime_error("idem dev-broker did not answer '" + command + "'");
  return *line;
}

void DevBrokerProcess::create_topic(const std::string& name, int partitions) {
  const std::string answer = control(fmt::format("create-topic {} {}", name, partitions));
  if (answer != "ok") throw std::runtime_error("create-topic " + name + ": " + answer);
}

int DevBrokerProcess::stop() {
  process_.kill(SIGTERM);
  return process_.wait(30s);
}

// --- workload --------------------------------------------------------------------

namespace {

std::string v4_uuid(std::mt19937_64& rng) {
  std::uint64_t hi = rng();
  std::uint64_t lo = rng();
  hi = (hi & ~0xF000ULL) | 0x4000ULL;                         // version 4
  lo = (lo & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;  // RFC variant
  return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32, (hi >> 16) & 0xFFFF,
                     hi & 0xFFFF, lo >> 48, lo & 0xFFFFFFFFFFFFULL);
}

OrderConfirmed make_event(std::int64_t order_id) {
  OrderConfirmed e;
  e.event_id = new_uuid_v7();
  e.occurred_at =
      std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
  e.order_id = order_id;
  e.customer_id = 1 + order_id % 97;
  e.total_amount = Amount::from_hundredths(100 + order_id % 10000);
  return e;
}

// The six malformed kinds, each with the DLQ error class the consumer must give it.
// `n` makes every payload unique, so each can be found again in the topic.
MalformedMessage malformed(int kind, std::int64_t n, std::mt19937_64& rng) {
  const std::string id = new_uuid_v7().to_string();
  constexpr const char* kTail =
      R"("occurred_at":"2024-05-01T12:00:00Z","order_id":{},"customer_id":7)";
  const std::string tail = fmt::format(fmt::runtime(kTail), n);
  switch (kind) {
    case 0:
      return {
          fmt::format(R"({{"event_id":"{}","event_type":"order.confirmed.v1",{},"total_amount":)",
                      id, tail),  // truncated: not well-formed JSON
          "validation.invalid_json"};
    case 1:  // schema failure: a required field is missing
      return {fmt::format(R"({{"event_id":"{}","event_type":"order.confirmed.v1","occurred_at":)"
                          R"("2024-05-01T12:00:00Z","order_id":{},"total_amount":"10.00"}})",
                          id, n),
              "validation.missing"};
    case 2:  // schema failure: a numeric amount (money is an exact decimal string)
      return {fmt::format(
                  R"({{"event_id":"{}","event_type":"order.confirmed.v1",{},"total_amount":10.5}})",
                  id, tail),
              "validation.wrong_type"};
    case 3:  // no event_id at all
      return {
          fmt::format(R"({{"event_type":"order.confirmed.v1",{},"total_amount":"10.00"}})", tail),
          "validation.missing"};
    case 4:  // a UUID, but version 4
      return {
          fmt::format(
              R"({{"event_id":"{}","event_type":"order.confirmed.v1",{},"total_amount":"10.00"}})",
              v4_uuid(rng), tail),
          "validation.not_uuid_v7"};
    default:  // an event type no handler knows
      return {
          fmt::format(
              R"({{"event_id":"{}","event_type":"order.exploded.v9",{},"total_amount":"10.00"}})",
              id, tail),
          "validation.unknown_event_type"};
  }
}

constexpr int kMalformedKinds = 6;

}  // namespace

Workload make_workload(const std::string& topic, std::size_t total, double duplicate_ratio,
                       double malformed_ratio_per_kind, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Workload w;
  const auto per_kind =
      static_cast<std::size_t>(static_cast<double>(total) * malformed_ratio_per_kind);
  w.malformed = per_kind * kMalformedKinds;
  w.duplicates = static_cast<std::size_t>(static_cast<double>(total) * duplicate_ratio);
  if (w.malformed + w.duplicates >= total)
    throw std::invalid_argument("workload: too few valid events");
  const std::size_t valid = total - w.malformed - w.duplicates;

  std::vector<TestRecord> records;
  records.reserve(total);
  std::vector<std::size_t> valid_index;
  for (std::size_t i = 0; i < valid; ++i) {
    const OrderConfirmed e = make_event(static_cast<std::int64_t>(i) + 1);
    w.valid_ids.insert(e.event_id.to_string());
    valid_index.push_back(records.size());
    records.push_back({topic,
                       std::to_string(e.order_id),
                       to_json(e),
                       {{"event_id", e.event_id.to_string()}},
                       -1});
  }
  // Resends: the very same record again (same key, so the same partition; new offset).
  std::uniform_int_distribution<std::size_t> pick(0, valid - 1);
  for (std::size_t i = 0; i < w.duplicates; ++i) records.push_back(records[valid_index[pick(rng)]]);
  std::int64_t n = 1'000'000;
  for (int kind = 0; kind < kMalformedKinds; ++kind) {
    for (std::size_t i = 0; i < per_kind; ++i) {
      MalformedMessage m = malformed(kind, ++n, rng);
      w.malformed_class_by_payload.emplace(m.payload, m.expected_class);
      records.push_back({topic, fmt::format("bad-{}", n), std::move(m.payload), {}, -1});
    }
  }
  std::shuffle(records.begin(), records.end(), rng);
  w.records = std::move(records);
  return w;
}

Workload straddling_workload(const std::string& topic, std::size_t total, std::size_t every,
                             std::size_t near, std::size_t far, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> distance(near, far);
  Workload w;
  // Copies by the index of the record they are due at (sent at the first free one).
  std::map<std::size_t, std::vector<TestRecord>> copies_at;
  std::int64_t order = 0;
  while (w.records.size() < total) {
    if (auto due = copies_at.begin(); due != copies_at.end() && due->first <= w.records.size()) {
      for (auto& copy : due->second) {
        if (w.records.size() == total) break;
        w.records.push_back(std::move(copy));
        ++w.duplicates;
      }
      copies_at.erase(due);
      continue;
    }
    const OrderConfirmed e = make_event(++order);
    w.valid_ids.insert(e.event_id.to_string());
    TestRecord record{
        topic, std::to_string(e.order_id), to_json(e), {{"event_id", e.event_id.to_string()}}, -1};
    if (order % static_cast<std::int64_t>(every) == 0)
      copies_at[w.records.size() + distance(rng)].push_back(record);
    w.records.push_back(std::move(record));
  }
  return w;
}

void produce(const std::string& bootstrap, const Workload& w, std::size_t begin, std::size_t end) {
  KafkaTestProducer producer(bootstrap);
  for (std::size_t i = begin; i < end && i < w.records.size(); ++i) producer.send(w.records[i]);
  producer.flush(60s);
}

MalformedLocations locate_malformed(const std::string& bootstrap, const std::string& topic,
                                    int partitions, const Workload& w) {
  const auto end = end_offsets(bootstrap, topic, partitions);
  std::size_t count = 0;
  for (auto o : end) count += static_cast<std::size_t>(o);
  const auto records = read_topic(bootstrap, topic, partitions, count, 60s);
  if (records.size() != count) {
    throw std::runtime_error(
        fmt::format("locate_malformed: read {} of {} records of {}", records.size(), count, topic));
  }
  MalformedLocations out;
  for (const auto& r : records) {
    const auto it = w.malformed_class_by_payload.find(r.payload);
    if (it != w.malformed_class_by_payload.end()) out[{r.partition, r.offset}] = it->second;
  }
  return out;
}

// --- consumer processes -------------------------------------------------------------

ChildProcess start_consumer(const std::string& program, const ConsumerArgs& a) {
  std::vector<std::string> argv = {"--brokers",
                                   a.brokers,
                                   "--topic",
                                   a.topic,
                                   "--group",
                                   a.group,
                                   "--db",
                                   a.db,
                                   "--batch",
                                   std::to_string(a.batch),
                                   "--crash-point",
                                   a.crash_point,
                                   "--crash-probability",
                                   fmt::format("{}", a.crash_probability),
                                   "--seed",
                                   std::to_string(a.seed),
                                   "--handler",
                                   a.handler};
  argv = with_mock_group(std::move(argv));
  argv.insert(argv.end(), {"--kafka", "reconnect.backoff.max.ms=1000"});
  for (const auto& kv : a.kafka) {
    argv.emplace_back("--kafka");
    argv.push_back(kv);
  }
  if (a.pipeline_depth != 0) {
    argv.emplace_back("--pipeline-depth");
    argv.push_back(std::to_string(a.pipeline_depth));
  }
  ChildProcess child = ChildProcess::spawn(program, argv);
  std::vector<std::string> seen;
  if (!expect_line(child, "ready", 30s, &seen)) {
    throw std::runtime_error(fmt::format("consumer_child did not say ready (said: {})",
                                         seen.empty() ? "nothing" : seen.back()));
  }
  return child;
}

std::map<std::string, std::uint64_t> parse_stats(std::string_view line) {
  std::map<std::string, std::uint64_t> out;
  if (!line.starts_with("stats ")) return out;
  std::istringstream in{std::string(line.substr(6))};
  std::string word;
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq == std::string::npos) continue;
    out[word.substr(0, eq)] = std::stoull(word.substr(eq + 1));
  }
  return out;
}

std::map<std::string, std::uint64_t> read_stats(ChildProcess& child,
                                                std::chrono::milliseconds timeout) {
  const auto line = read_line_starting_with(child, "stats ", timeout);
  return line ? parse_stats(*line) : std::map<std::string, std::uint64_t>{};
}

bool group_caught_up(const std::string& bootstrap, const std::string& group,
                     const std::string& topic, const std::vector<std::int64_t>& end) {
  try {
    return committed_offsets(bootstrap, group, topic, static_cast<int>(end.size()), 5s) == end;
  } catch (const std::exception&) {
    return false;  // the coordinator is busy (a rebalance): ask again later
  }
}

// --- rewinding a group -----------------------------------------------------------------

std::string rewind_group(const std::string& bootstrap, const std::string& group,
                         const std::string& topic, int partitions) {
  // The members' session timeout: the mock cluster can leave the next member's join
  // unanswered when the rewinding member's differs.
  idem::rewind_group(bootstrap, group, topic, partitions, 60s, mock_group_properties());
  return "committed-zero";
}

// --- effects and the invariant -------------------------------------------------------------

std::map<std::string, std::int64_t> effects_per_event(const std::string& db_url,
                                                      const std::string& group) {
  auto store = open_store(db_url);
  auto tx = store->begin();
  const Rows rows = tx->execute(
      "SELECT event_id, count(*) FROM effect_log WHERE consumer_group = $1 GROUP BY event_id",
      group);
  tx->rollback();
  std::map<std::string, std::int64_t> out;
  for (const RowView row : rows) out[row.uuid(0).to_string()] = row.int64(1);
  return out;
}

std::int64_t effect_rows(const std::string& db_url, const std::string& group) {
  auto store = open_store(db_url);
  auto tx = store->begin();
  const Rows rows = tx->execute("SELECT count(*) FROM effect_log WHERE consumer_group = $1", group);
  tx->rollback();
  return rows[0].int64(0);
}

::testing::AssertionResult exactly_once_invariant(const std::string& bootstrap,
                                                  const std::string& db_url,
                                                  const std::string& topic, int partitions,
                                                  const std::string& group, const Workload& w,
                                                  const MalformedLocations& malformed) {
  std::ostringstream problems;
  constexpr int kExamples = 5;

  // 1. Exactly one effect per valid event; nothing for ids never sent.
  const auto effects = effects_per_event(db_url, group);
  int missing = 0;
  int doubled = 0;
  int unknown = 0;
  for (const auto& id : w.valid_ids) {
    const auto it = effects.find(id);
    if (it == effects.end()) {
      if (missing++ < kExamples) problems << "\n  no effect for event " << id;
    } else if (it->second != 1) {
      if (doubled++ < kExamples) problems << "\n  " << it->second << " effects for event " << id;
    }
  }
  for (const auto& [id, n] : effects) {
    if (!w.valid_ids.contains(id) && unknown++ < kExamples)
      problems << "\n  effect for an id that was never sent as a valid event: " << id;
  }
  if (missing + doubled + unknown > 0) {
    problems << fmt::format(
        "\n  valid events: {}, with no effect: {}, with >1 effect: {}, "
        "unknown ids: {}",
        w.valid_ids.size(), missing, doubled, unknown);
  }

  // 2. Every malformed message in the DLQ with its reason; no valid record there.
  const std::string dlq = topic + ".dlq";
  const auto dlq_end = end_offsets(bootstrap, dlq, 1);
  const auto letters = read_topic(bootstrap, dlq, 1, static_cast<std::size_t>(dlq_end[0]), 60s);
  if (letters.size() != static_cast<std::size_t>(dlq_end[0])) {
    problems << fmt::format("\n  read {} of {} DLQ records", letters.size(), dlq_end[0]);
  }
  std::map<std::pair<std::int32_t, std::int64_t>, std::set<std::string>> found;
  int foreign = 0;
  for (const auto& r : letters) {
    if (r.header("idem.consumer.group") != group) continue;
    if (r.header("idem.original.topic") != topic) {
      if (foreign++ < kExamples) problems << "\n  DLQ record from another topic";
      continue;
    }
    const std::pair<std::int32_t, std::int64_t> at{
        std::stoi(r.header("idem.original.partition").value_or("-1")),
        std::stoll(r.header("idem.original.offset").value_or("-1"))};
    if (!malformed.contains(at)) {
      if (foreign++ < kExamples)
        problems << fmt::format("\n  DLQ holds a record that is not malformed: [{}] offset {} ({})",
                                at.first, at.second, r.header("idem.error.class").value_or("?"));
      continue;
    }
    found[at].insert(r.header("idem.error.class").value_or(""));
  }
  int undelivered = 0;
  int wrong_class = 0;
  for (const auto& [at, expected] : malformed) {
    const auto it = found.find(at);
    if (it == found.end()) {
      if (undelivered++ < kExamples)
        problems << fmt::format("\n  malformed [{}] offset {} ({}) is not in the DLQ", at.first,
                                at.second, expected);
    } else if (it->second != std::set<std::string>{expected}) {
      if (wrong_class++ < kExamples)
        problems << fmt::format("\n  malformed [{}] offset {}: DLQ class {} but expected {}",
                                at.first, at.second, *it->second.begin(), expected);
    }
  }
  if (malformed.size() < w.malformed) {
    problems << fmt::format("\n  only {} of {} malformed messages were found in the topic",
                            malformed.size(), w.malformed);
  }

  // 3. Nothing lost: every record of the topic is behind the group's committed offsets.
  const auto end = end_offsets(bootstrap, topic, partitions);
  const auto committed = committed_offsets(bootstrap, group, topic, partitions);
  if (committed != end) {
    problems << fmt::format("\n  committed offsets {} differ from end offsets {}",
                            fmt::join(committed, ","), fmt::join(end, ","));
  }

  const std::string text = problems.str();
  if (text.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "exactly-once invariant violated for group " << group << ":" << text;
}

// --- private PostgreSQL ----------------------------------------------------------------------

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::optional<std::string> PrivatePostgres::find_bin_dir() {
  if (auto bin = env("IDEM_TEST_PG_BIN"); bin && std::filesystem::exists(*bin + "/initdb"))
    return bin;
  std::vector<std::filesystem::path> candidates;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
    if (std::filesystem::exists(entry.path() / "bin" / "initdb"))
      candidates.push_back(entry.path() / "bin");
  }
  if (candidates.empty()) return std::nullopt;
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    return std::stoi(a.parent_path().filename().string()) <
           std::stoi(b.parent_path().filename().string());
  });
  return candidates.back().string();
}

PrivatePostgres::PrivatePostgres(const std::string& bin_dir) : bin_(bin_dir) {
  if (::geteuid() == 0) run_as_ = env("IDEM_TEST_PG_RUN_AS").value_or("postgres");
  std::string pattern = "/tmp/idem-pgfault-XXXXXX";  // short: the socket path must fit
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::system_error(errno, std::generic_category(), "mkdtemp");
  dir_ = pattern;
  const std::string prefix = run_as_.empty() ? "" : "runuser -u " + run_as_ + " -- ";
  if (!run_as_.empty()) {
    if (std::system(("chown " + shell_quote(run_as_) + " " + shell_quote(dir_.string())).c_str()) !=
        0)
      throw std::runtime_error("chown of " + dir_.string() + " failed");
  }
  const std::string initdb = fmt::format(
      "cd {} && {}{}/initdb -D {}/data -U postgres -E UTF8 --no-locale --auth-local=trust "
      "--auth-host=trust --no-sync > {}/initdb.log 2>&1",
      shell_quote(dir_.string()), prefix, bin_, shell_quote(dir_.string()),
      shell_quote(dir_.string()));
  if (std::system(initdb.c_str()) != 0)
    throw std::runtime_error("initdb failed: " + read_file(dir_ / "initdb.log"));
  {
    std::ofstream conf(dir_ / "data" / "postgresql.conf", std::ios::app);
    conf << "\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '" << dir_.string()
         << "'\nfsync = off\nfull_page_writes = off\nmax_connections = 50\n"
            "log_min_messages = warning\n";
  }
  for (int attempt = 0; attempt < 10; ++attempt) {
    port_ = unused_listen_port();
    {
      std::ofstream conf(dir_ / "data" / "postgresql.conf", std::ios::app);
      conf << "port = " << port_ << "\n";  // the last setting wins; kept for restarts
    }
    if (run_pg_ctl("-w -t 30 start") == 0) {
      running_ = true;
      break;
    }
  }
  if (!running_)
    throw std::runtime_error("postgres did not start: " + read_file(dir_ / "server.log"));
  const std::string create = fmt::format(
      "{}/psql -X -q -h 127.0.0.1 -p {} -U postgres -d postgres -c 'CREATE DATABASE idem_test' "
      ">> {}/server.log 2>&1",
      bin_, port_, shell_quote(dir_.string()));
  if (std::system(create.c_str()) != 0)
    throw std::runtime_error("CREATE DATABASE failed: " + read_file(dir_ / "server.log"));
}

PrivatePostgres::~PrivatePostgres() {
  if (frozen_) thaw();
  if (running_) static_cast<void>(run_pg_ctl("-m immediate -w -t 30 stop"));
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string PrivatePostgres::url() const {
  return fmt::format("postgresql://postgres@127.0.0.1:{}/idem_test", port_);
}

int PrivatePostgres::run_pg_ctl(const std::string& args) const {
  const std::string prefix = run_as_.empty() ? "" : "runuser -u " + run_as_ + " -- ";
  const std::string cmd =
      fmt::format("cd {} && {}{}/pg_ctl -D {}/data -l {}/server.log {} > /dev/null 2>&1",
                  shell_quote(dir_.string()), prefix, bin_, shell_quote(dir_.string()),
                  shell_quote(dir_.string()), args);
  return std::system(cmd.c_str());
}

void PrivatePostgres::stop(const std::string& mode) {
  if (run_pg_ctl("-m " + mode + " -w -t 30 stop") != 0)
    throw std::runtime_error("pg_ctl stop failed: " + read_file(dir_ / "server.log"));
  running_ = false;
}

namespace {

// The postmaster (first line of postmaster.pid) and its children, found through /proc.
std::vector<pid_t> server_processes(const std::filesystem::path& data_dir) {
  std::ifstream pid_file(data_dir / "postmaster.pid");
  pid_t postmaster = 0;
  if (!(pid_file >> postmaster) || postmaster <= 0)
    throw std::runtime_error("no postmaster.pid in " + data_dir.string());
  std::vector<pid_t> pids{postmaster};
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    if (rest >> state >> ppid && ppid == postmaster) pids.push_back(std::stoi(name));
  }
  return pids;
}

}  // namespace

void PrivatePostgres::freeze() {
  // The postmaster first, so that it forks no new backend meanwhile.
  for (const pid_t pid : server_processes(dir_ / "data")) ::kill(pid, SIGSTOP);
  frozen_ = true;
}

void PrivatePostgres::thaw() {
  for (const pid_t pid : server_processes(dir_ / "data")) ::kill(pid, SIGCONT);
  frozen_ = false;
}

void PrivatePostgres::start() {
  if (run_pg_ctl("-w -t 30 start") != 0)
    throw std::runtime_error("pg_ctl start failed: " + read_file(dir_ / "server.log"));
  running_ = true;
}

}  // namespace idem::test
