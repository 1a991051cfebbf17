// `idem offsets show|reset`: a consumer group's position, as kept in the store
// (idem_consumer_offsets, written in the transaction of the effects) and in Kafka's
// committed offsets (docs/consumer-offsets.md). `show` puts the two side by side; `reset`
// writes both, so that a consumer with offsets in the store follows it (a reset made with
// Kafka's own tools is reported by the consumer and not followed).
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "config_options.hpp"
#include "idem/config.hpp"
#include "idem/consumer_offsets.hpp"
#include "idem/devtools/kafka_admin.hpp"
#include "idem/error.hpp"
#include "idem/store.hpp"

namespace idem::cli {

namespace {

using namespace std::chrono_literals;

struct Options {
  std::string db;
  std::string brokers;
  std::string group;
  std::string topic;
  std::optional<std::int32_t> partition;
  std::optional<std::int64_t> to_offset;
  bool to_earliest = false;
  bool to_latest = false;
};

struct Connected {
  Config config;
  std::unique_ptr<Store> store;
};

Connected connect(const ConfigOptions& cfg) {
  Connected c{cfg.load(), nullptr};
  c.config.require({"store.url", "kafka.bootstrap.servers", "consumer.group"});
  StoreOptions options = c.config.store_options;
  options.application_name = "idem-offsets";
  c.store = open_store(c.config.store_url, options);
  return c;
}

std::string letters_of(const StoredOffset* row) {
  if (row == nullptr || row->acknowledged_letters.empty()) return "-";
  return fmt::format("{}", fmt::join(row->acknowledged_letters, ","));
}

void show(const Connected& c, const std::string& only_topic) {
  const std::string& group = c.config.consumer.group_id;
  std::vector<StoredOffset> rows;
  {
    auto tx = c.store->begin_read();
    rows = read_stored_offsets(*tx, group, only_topic);
    tx->rollback();
  }
  std::set<std::string> topics;
  if (!only_topic.empty()) topics.insert(only_topic);
  for (const auto& r : rows) topics.insert(r.topic);
  std::cout << "topic\tpartition\tstored\tkafka\tstore_minus_kafka\tacknowledged_letters\n";
  for (const std::string& topic : topics) {
    const int partitions = partition_count(c.config.bootstrap_servers, topic, 10s);
    const std::vector<std::int64_t> kafka =
        committed_offsets(c.config.bootstrap_servers, group, topic, partitions, 10s);
    for (int p = 0; p < partitions; ++p) {
      const StoredOffset* row = nullptr;
      for (const auto& r : rows) {
        if (r.topic == topic && r.partition == p) row = &r;
      }
      const std::int64_t committed = kafka.at(static_cast<std::size_t>(p));
      const std::string stored = row != nullptr ? std::to_string(row->next_offset) : "-";
      const std::string in_kafka = committed >= 0 ? std::to_string(committed) : "-";
      const std::string diff = row != nullptr && committed >= 0
                                   ? fmt::format("{:+}", row->next_offset - committed)
                                   : std::string("-");
      std::cout << fmt::format("{}\t{}\t{}\t{}\t{}\t{}\n", topic, p, stored, in_kafka, diff,
                               letters_of(row));
    }
  }
  std::cout << std::flush;
}

void reset(const Connected& c, const Options& o) {
  const std::string& brokers = c.config.bootstrap_servers;
  const int partitions = partition_count(brokers, o.topic, 10s);
  const int chosen = (o.to_offset ? 1 : 0) + (o.to_earliest ? 1 : 0) + (o.to_latest ? 1 : 0);
  if (chosen != 1) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "idem offsets reset needs exactly one of --to-offset, --to-earliest, --to-latest");
  }
  if (o.partition && (*o.partition < 0 || *o.partition >= partitions)) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                fmt::format("--partition {}: topic {} has partitions 0..{}", *o.partition, o.topic,
                            partitions - 1));
  }
  const std::vector<std::int64_t> ends =
      o.to_latest ? end_offsets(brokers, o.topic, partitions, 10s) : std::vector<std::int64_t>{};
  std::map<std::int32_t, std::int64_t> targets;
  for (int p = 0; p < partitions; ++p) {
    if (o.partition && *o.partition != p) continue;
    // Earliest: 0, and a consumer fetching below the log start is moved to it by
    // auto.offset.reset.
    targets[p] = o.to_offset   ? *o.to_offset
                 : o.to_latest ? ends.at(static_cast<std::size_t>(p))
                               : 0;
  }
  reset_group_offsets(*c.store, brokers, c.config.consumer.group_id, o.topic, targets, 60s,
                      c.config.kafka);
  for (const auto& [p, offset] : targets) {
    std::cout << fmt::format("reset group={} topic={} partition={} offset={} (store and Kafka)\n",
                             c.config.consumer.group_id, o.topic, p, offset);
  }
  std::cout << std::flush;
}

}  // namespace

void register_offsets(CLI::App& app, ExitCode& exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "offsets", "A consumer group's position in the store and in Kafka: show, reset");
  cmd->require_subcommand(1);
  auto opts = std::make_shared<Options>();
  const auto common = [&](CLI::App* sub) {
    auto cfg = std::make_shared<ConfigOptions>(sub);
    cfg->bind(sub->add_option("--db", opts->db,
                              "Store URL: postgresql://... or sqlite:///path.db (store.url)"),
              "store.url");
    cfg->bind(sub->add_option("--brokers", opts->brokers,
                              "Kafka bootstrap servers host:port,... (kafka.bootstrap.servers)"),
              "kafka.bootstrap.servers");
    cfg->bind(sub->add_option("--group", opts->group, "Consumer group (consumer.group)"),
              "consumer.group");
    return cfg;
  };

  CLI::App* show_cmd = cmd->add_subcommand(
      "show", "Per partition: the stored offset, Kafka's committed offset, their difference");
  auto show_cfg = common(show_cmd);
  show_cmd->add_option("--topic", opts->topic, "Only this topic (default: every stored topic)");
  show_cmd->callback([opts, show_cfg, &exit_code] {
    show(connect(*show_cfg), opts->topic);
    exit_code.value = 0;
  });

  CLI::App* reset_cmd = cmd->add_subcommand(
      "reset",
      "Set the group's position in both places (store and Kafka); no member may be running");
  auto reset_cfg = common(reset_cmd);
  reset_cmd->add_option("--topic", opts->topic, "The topic")->required();
  reset_cmd->add_option("--partition", opts->partition, "Only this partition (default: all)");
  reset_cmd->add_option("--to-offset", opts->to_offset, "The next offset to consume");
  reset_cmd->add_flag("--to-earliest", opts->to_earliest, "The beginning of each partition");
  reset_cmd->add_flag("--to-latest", opts->to_latest, "The end of each partition");
  reset_cmd->callback([opts, reset_cfg, &exit_code] {
    reset(connect(*reset_cfg), *opts);
    exit_code.value = 0;
  });
}

}  // namespace idem::cli
