// `idem dlq list|show|replay`: inspect a dead-letter topic and replay it (library:
// idem/dlq.hpp). Results go to stdout, progress and refusals to stderr.
//
// Exit codes of `replay`: 0 when every selected record was replayed (or, with
// --dry-run, would be); 3 when some were refused (past the dedup horizon, or with no
// target topic) and none failed; 1 when the broker did not acknowledge some.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/config.hpp"
#include "idem/dlq.hpp"
#include "idem/error.hpp"
#include "idem/timestamp.hpp"

namespace idem::cli {

namespace {

using std::chrono::milliseconds;

std::string human_age(std::optional<milliseconds> age) {
  if (!age) return "-";
  const auto s = age->count() / 1000;
  if (s < 0) return fmt::format("-{}s", -s);  // a producer clock ahead of ours
  if (s < 120) return fmt::format("{}s", s);
  if (s < 7200) return fmt::format("{}m", s / 60);
  if (s < 172'800) return fmt::format("{}h", s / 3600);
  return fmt::format("{}d", s / 86'400);
}

std::string when(std::optional<std::chrono::system_clock::time_point> t) {
  if (!t) return "-";
  return format_rfc3339(std::chrono::time_point_cast<std::chrono::microseconds>(*t));
}

/// Flags shared by list, show and replay. The connection, the DLQ topic and the timeout
/// are configuration (kafka.*, dlq.*); the filters select records for this one
/// invocation, so they are flags only: a filter left in a file or the environment would
/// silently hide dead letters.
struct CommonOptions {
  std::shared_ptr<ConfigOptions> config;
  std::string brokers, topic, timeout;
  std::string reason, key, group, event_id, min_age, max_age;
  std::optional<std::int32_t> partition;
  std::optional<std::int64_t> offset;

  void add_to(CLI::App* cmd) {
    config = std::make_shared<ConfigOptions>(cmd);
    config->bind(cmd->add_option("--brokers", brokers,
                                 "Kafka bootstrap servers host:port,... (kafka.bootstrap.servers)"),
                 "kafka.bootstrap.servers");
    config->bind(
        cmd->add_option("--topic", topic, "The dead-letter topic, e.g. orders.dlq (dlq.topic)"),
        "dlq.topic");
    const CLI::Option* timeout_flag =
        config->bind(cmd->add_option("--timeout", timeout,
                                     "Deadline of each broker step (dlq.timeout, default 30s)"),
                     "dlq.timeout");
    config->bind_old_name(cmd->add_option("--timeout-s"), timeout_flag, "s");
    cmd->add_option("--reason", reason,
                    "Error class (handler.dead_letter), or a family of them (handler)");
    cmd->add_option("--key", key, "Only this Kafka key");
    cmd->add_option("--group", group, "Only dead letters of this consumer group");
    cmd->add_option("--event-id", event_id, "Only this event id");
    cmd->add_option("--min-age", min_age, "Only dead letters at least this old (90s, 15m, 2h, 7d)");
    cmd->add_option("--max-age", max_age, "Only dead letters at most this old");
    cmd->add_option("--partition", partition, "Only this DLQ partition");
    cmd->add_option("--offset", offset, "Only this DLQ offset");
  }

  /// The configuration, with the keys every dlq subcommand needs checked.
  [[nodiscard]] Config load() const {
    Config c = config->load();
    c.require({"kafka.bootstrap.servers", "dlq.topic"});
    return c;
  }

  [[nodiscard]] static DlqConnection connection(const Config& c) {
    return DlqConnection{c.bootstrap_servers, c.kafka, c.dlq.timeout};
  }

  [[nodiscard]] DlqFilter filter() const {
    DlqFilter f;
    if (!reason.empty()) f.reason = reason;
    if (!key.empty()) f.key = key;
    if (!group.empty()) f.consumer_group = group;
    if (!event_id.empty()) {
      f.event_id = Uuid::parse(event_id);
      if (!f.event_id) {
        throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                    fmt::format("--event-id expects a UUID, got '{}'", event_id));
      }
    }
    if (!min_age.empty()) f.min_age = age("--min-age", min_age);
    if (!max_age.empty()) f.max_age = age("--max-age", max_age);
    f.partition = partition;
    f.offset = offset;
    return f;
  }

 private:
  static milliseconds age(std::string_view flag, const std::string& text) {
    if (const auto d = parse_duration(text)) return *d;
    throw Error(
        ErrorCode::InvalidArgument, ErrorSource::Config,
        fmt::format("{} expects a duration such as 90s, 15m, 2h or 7d, got '{}'", flag, text));
  }
};

void print_line(const DeadLetterRecord& r, std::chrono::system_clock::time_point now) {
  std::cout << fmt::format(
      "{}/{}  age={}  reason={}  group={}  key={}  event_id={}  event_age={}  from={}[{}]@{}  "
      "attempts={}  {}\n",
      r.partition, r.offset,
      human_age(r.dead_lettered_at ? std::optional(std::chrono::duration_cast<milliseconds>(
                                         now - *r.dead_lettered_at))
                                   : std::nullopt),
      r.error_class.empty() ? "-" : r.error_class,
      r.consumer_group.empty() ? "-" : r.consumer_group, r.key.empty() ? "-" : r.key,
      r.event_id ? r.event_id->to_string() : "-", human_age(r.event_age(now)),
      r.original_topic.empty() ? "-" : r.original_topic,
      r.original_partition ? std::to_string(*r.original_partition) : "-",
      r.original_offset ? std::to_string(*r.original_offset) : "-",
      r.attempts ? std::to_string(*r.attempts) : "-", r.error_message);
}

void print_full(const DeadLetterRecord& r, std::chrono::system_clock::time_point now) {
  std::cout << fmt::format("dead letter {} [{}] offset {}\n", r.topic, r.partition, r.offset);
  std::cout << fmt::format("  dead-lettered at   {}\n", when(r.dead_lettered_at));
  std::cout << fmt::format("  reason             {}\n", r.error_class);
  std::cout << fmt::format("  message            {}\n", r.error_message);
  std::cout << fmt::format("  consumer group     {}\n", r.consumer_group);
  std::cout << fmt::format("  original           {} [{}] offset {}\n", r.original_topic,
                           r.original_partition ? std::to_string(*r.original_partition) : "?",
                           r.original_offset ? std::to_string(*r.original_offset) : "?");
  std::cout << fmt::format("  attempts           {}\n",
                           r.attempts ? std::to_string(*r.attempts) : "?");
  if (r.event_id) {
    std::cout << fmt::format("  event id           {}", r.event_id->to_string());
    if (r.event_id->is_v7()) {
      std::cout << fmt::format(
          " (born {}, {} ago)",
          format_rfc3339(std::chrono::time_point_cast<std::chrono::microseconds>(
              std::chrono::system_clock::time_point(r.event_id->timestamp()))),
          human_age(r.event_age(now)));
    }
    std::cout << '\n';
  } else {
    std::cout << "  event id           (none)\n";
  }
  std::cout << fmt::format("  key                {}\n", r.key);
  std::cout << "  headers\n";
  for (const auto& [name, value] : r.headers) std::cout << fmt::format("    {}: {}\n", name, value);
  std::cout << fmt::format("  payload ({} bytes)\n    {}\n\n", r.payload.size(), r.payload);
}

/// A one-line progress bar on a terminal; otherwise a line per 10%.
class ProgressBar {
 public:
  void update(const ReplayProgress& p) {
    if (p.total == 0) return;
    if (tty_) {
      constexpr std::size_t kWidth = 40;
      const std::size_t filled = kWidth * p.done / p.total;
      std::fprintf(stderr, "\r[%s%s] %zu/%zu", std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, ' ').c_str(), p.done, p.total);
      if (p.done == p.total) std::fputc('\n', stderr);
      std::fflush(stderr);
      return;
    }
    const std::size_t tenth = 10 * p.done / p.total;
    if (tenth != last_tenth_ || p.done == p.total) {
      last_tenth_ = tenth;
      std::cerr << fmt::format("progress {}/{}\n", p.done, p.total);
    }
  }

 private:
  bool tty_ = isatty(STDERR_FILENO) == 1;
  std::size_t last_tenth_ = 0;
};

}  // namespace

void register_dlq(CLI::App& app, ExitCode& exit_code) {
  CLI::App* dlq = app.add_subcommand("dlq", "Inspect and replay a dead-letter topic");
  dlq->require_subcommand(1);

  // list and show select alike and differ only in how they print each dead letter.
  using Printer = void (*)(const DeadLetterRecord&, std::chrono::system_clock::time_point);
  const auto add_reader = [&](const char* name, const char* help, Printer print) {
    auto opts = std::make_shared<CommonOptions>();
    CLI::App* cmd = dlq->add_subcommand(name, help);
    opts->add_to(cmd);
    cmd->callback([opts, print, &exit_code] {
      const Config config = opts->load();
      const auto records =
          read_dead_letters(CommonOptions::connection(config), config.dlq.topic, opts->filter());
      const auto now = std::chrono::system_clock::now();
      for (const auto& r : records) print(r, now);
      std::cerr << fmt::format("{} dead letter(s)\n", records.size());
      exit_code.value = 0;
    });
  };
  add_reader("list", "One line per dead letter (filters apply)", &print_line);
  add_reader("show", "Decoded headers and payload of each selected dead letter", &print_full);

  struct ReplayFlags {
    CommonOptions common;
    std::string to;
    bool dry_run = false;
    std::string rate;
    bool force = false;
    std::string retention;
    std::string safety_margin;
  };
  auto replay_opts = std::make_shared<ReplayFlags>();
  CLI::App* replay = dlq->add_subcommand(
      "replay",
      "Send selected dead letters back to their original topic (or --to), keeping event ids");
  replay_opts->common.add_to(replay);
  // --to, --dry-run and --force decide what this one replay does: flags only (a --force
  // left in a file would replay events past the dedup horizon without anyone asking).
  replay->add_option("--to", replay_opts->to,
                     "Target topic instead of each record's original topic");
  replay->add_flag("--dry-run", replay_opts->dry_run, "Say what would be replayed; send nothing");
  replay->add_flag("--force", replay_opts->force,
                   "Also replay events past the dedup horizon (they may be applied twice)");
  ConfigOptions& replay_config = *replay_opts->common.config;
  replay_config.bind(
      replay->add_option("--rate", replay_opts->rate,
                         "At most this many records per second, 0: no limit (dlq.replay_rate)"),
      "dlq.replay_rate");
  const CLI::Option* retention = replay_config.bind(
      replay->add_option("--retention", replay_opts->retention,
                         "Dedup retention of the consumers, event time (dedup.retention, "
                         "default 7d)"),
      "dedup.retention");
  replay_config.bind_old_name(replay->add_option("--retention-hours"), retention, "h");
  const CLI::Option* safety_margin = replay_config.bind(
      replay->add_option("--safety-margin", replay_opts->safety_margin,
                         "Horizon = retention - margin (dedup.safety_margin, default 1h)"),
      "dedup.safety_margin");
  replay_config.bind_old_name(replay->add_option("--safety-margin-hours"), safety_margin, "h");
  replay->callback([replay_opts, &exit_code] {
    const ReplayFlags& f = *replay_opts;
    const Config config = f.common.load();
    ReplayOptions options;
    options.filter = f.common.filter();
    options.to_topic = f.to;
    options.dry_run = f.dry_run;
    options.rate_limit = config.dlq.replay_rate;
    options.force = f.force;
    options.horizon = config.dedup.horizon;
    ProgressBar bar;
    if (!f.dry_run) options.on_progress = [&bar](const ReplayProgress& p) { bar.update(p); };

    const ReplayReport report =
        replay_dead_letters(CommonOptions::connection(config), config.dlq.topic, options);
    const auto now = std::chrono::system_clock::now();
    for (const ReplayItem& item : report.items) {
      const DeadLetterRecord& r = item.record;
      const std::string id = r.event_id ? r.event_id->to_string() : "-";
      switch (item.action) {
        case ReplayAction::Replayed:
          if (f.dry_run) {
            std::cout << fmt::format("would replay {}/{} event_id={} reason={} -> {}\n",
                                     r.partition, r.offset, id, r.error_class, item.target_topic);
          }
          break;
        case ReplayAction::RefusedStale:
          std::cerr << fmt::format(
              "refused {}/{} event_id={}: event is {} old, past the dedup horizon of {} h "
              "(its dedup rows may be gone; --force replays it anyway)\n",
              r.partition, r.offset, id, human_age(r.event_age(now)),
              options.horizon.stale_age().count() / 3'600'000);
          break;
        case ReplayAction::NoTarget:
          std::cerr << fmt::format("skipped {}/{}: no idem.original.topic header; pass --to\n",
                                   r.partition, r.offset);
          break;
        case ReplayAction::Failed:
          std::cerr << fmt::format("failed {}/{} -> {}: {}\n", r.partition, r.offset,
                                   item.target_topic, item.error);
          break;
      }
    }
    std::cout << fmt::format("{}selected={} replayed={} refused_stale={} no_target={} failed={}\n",
                             f.dry_run ? "dry run: " : "", report.items.size(), report.replayed,
                             report.refused_stale, report.no_target, report.failed)
              << std::flush;
    if (report.failed > 0)
      exit_code.value = 1;
    else if (report.refused_stale + report.no_target > 0)
      exit_code.value = 3;
    else
      exit_code.value = 0;
  });
}

}  // namespace idem::cli
