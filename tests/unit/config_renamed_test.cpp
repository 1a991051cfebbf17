// Renamed configuration keys (KeySpec::renamed_from, idem/config.hpp): a key whose name
// carried a unit (`relay.retention_hours`) while it took any duration is now named
// without it (`relay.retention`). Its old name still reads in the file, the environment
// and the flags, with one warning naming both names and where the value came from;
// setting both names is an error naming both; the docs name the new keys only.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "idem/config.hpp"
#include "idem/metrics/metrics.hpp"
#include "support/store_backends.hpp"

namespace idem {
namespace config_renamed_test {

using namespace std::chrono_literals;

// The core's keys and admin.* (admin.stuck_after is a renamed key too).
const ConfigSchema& schema() {
  static const ConfigSchema s = [] {
    ConfigSchema out;
    out.add<AdminSettings>(declare_admin_keys);
    return out;
  }();
  return s;
}

std::string write_toml(const std::string& text) {
  static std::atomic<int> counter{0};
  const auto path = test::scratch_dir() / fmt::format("renamed-{}.toml", counter.fetch_add(1));
  std::ofstream(path) << text;
  return path.string();
}

std::vector<ConfigProblem> problems_of(const ConfigSources& sources) {
  try {
    static_cast<void>(load_config(sources, schema()));
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every old name -> the key's name now, as the schema declares them.
std::vector<std::pair<std::string, std::string>> renamed_keys() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const KeySpec& spec : schema().keys()) {
    for (const std::string& old_name : spec.renamed_from) out.emplace_back(old_name, spec.name);
  }
  return out;
}

TEST(RenamedKeys, EveryKeyThatNamedAUnitIsRenamedAndKeepsItsBareNumberUnit) {
  const std::map<std::string, std::string> expected = {
      {"admin.stuck_after_ms", "admin.stuck_after"},
      {"consumer.batch_window_ms", "consumer.batch_window"},
      {"consumer.dlq_ack_timeout_ms", "consumer.dlq_ack_timeout"},
      {"consumer.retry_initial_ms", "consumer.retry_initial"},
      {"consumer.retry_max_ms", "consumer.retry_max"},
      {"relay.poll_interval_ms", "relay.poll_interval"},
      {"relay.progress_interval_ms", "relay.progress_interval"},
      {"relay.retention_hours", "relay.retention"},
      {"store.busy_timeout_ms", "store.busy_timeout"},
      {"store.connect_timeout_ms", "store.connect_timeout"},
      {"store.statement_timeout_ms", "store.statement_timeout"},
  };
  const auto declared = renamed_keys();
  const std::map<std::string, std::string> declared_map(declared.begin(), declared.end());
  EXPECT_EQ(declared_map, expected);
  for (const auto& [old_name, new_name] : expected) {
    const KeySpec* spec = schema().find(new_name);
    ASSERT_NE(spec, nullptr) << new_name;
    EXPECT_EQ(schema().renamed_to(old_name), spec) << old_name;
    EXPECT_EQ(schema().find(old_name), nullptr) << old_name << " is no key of its own";
    // A bare number means what the old name said, and the description says so.
    const std::string unit = old_name.ends_with("_hours") ? "h" : "ms";
    EXPECT_EQ(spec->unit_of_bare_number, unit) << new_name;
    EXPECT_TRUE(contains(spec->help,
                         unit == "h" ? "a bare number is hours" : "a bare number is milliseconds"))
        << new_name << ": " << spec->help;
  }
  // Its value is a whole number of bytes and nothing else, so the name keeps its unit.
  ASSERT_NE(schema().find("consumer.max_message_bytes"), nullptr);
  EXPECT_EQ(schema().find("consumer.max_message_bytes")->type, KeyType::Integer);
}

TEST(RenamedKeys, AnOldNameInTheFileStillWorksWithOneWarningNamingTheLine) {
  const std::string file = write_toml(
      "[relay]\nretention_hours = 48\n[store]\n"
      "statement_timeout_ms = \"2s\"\n");
  ConfigSources sources;
  sources.file = file;
  const Config c = load_config(sources, schema());
  EXPECT_EQ(c.relay.retention, 48h) << "a bare number keeps meaning hours";
  EXPECT_EQ(c.store_options.statement_timeout, 2s);
  ASSERT_NE(c.entry("relay.retention"), nullptr);
  EXPECT_EQ(c.entry("relay.retention")->value, "48");
  EXPECT_EQ(c.entry("relay.retention")->origin.describe(), "file " + file + ":2");
  EXPECT_EQ(c.entry("relay.retention_hours"), nullptr) << "listed under its name now only";
  ASSERT_EQ(c.renamed_warnings.size(), 2U);
  std::string all;
  for (const auto& w : c.renamed_warnings) all += w + "\n";
  EXPECT_TRUE(contains(
      all, "relay.retention_hours (file " + file + ":2) is the old name of relay.retention"))
      << all;
  EXPECT_TRUE(contains(all, "store.statement_timeout_ms (file " + file +
                                ":4) is the old name of store.statement_timeout"))
      << all;
  EXPECT_TRUE(load_config({}, schema()).renamed_warnings.empty()) << "nothing old, no warning";
}

TEST(RenamedKeys, AnOldNameInTheEnvironmentStillWorksWithAWarningNamingBothVariables) {
  ConfigSources sources;
  sources.environment = {{"IDEM_CONSUMER_BATCH_WINDOW_MS", "20"},
                         {"IDEM_ADMIN_STUCK_AFTER_MS", "2m"}};
  const Config c = load_config(sources, schema());
  EXPECT_EQ(c.consumer.batch_window, 20ms);
  EXPECT_EQ(c.get<AdminSettings>().stuck_after, 2min);
  EXPECT_EQ(c.entry("consumer.batch_window")->origin.describe(),
            "env IDEM_CONSUMER_BATCH_WINDOW_MS");
  ASSERT_EQ(c.renamed_warnings.size(), 2U);
  const std::string& w =
      c.renamed_warnings[0].starts_with("admin") ? c.renamed_warnings[1] : c.renamed_warnings[0];
  EXPECT_TRUE(contains(w,
                       "consumer.batch_window_ms (env IDEM_CONSUMER_BATCH_WINDOW_MS) is the "
                       "old name of consumer.batch_window"))
      << w;
  EXPECT_TRUE(contains(w, "set IDEM_CONSUMER_BATCH_WINDOW")) << w;
}

TEST(RenamedKeys, AnOldNameWithSetStillWorksWithAWarning) {
  ConfigSources sources;
  sources.flags = {{"consumer.retry_max_ms", "30000", "--set"}};
  const Config c = load_config(sources, schema());
  EXPECT_EQ(c.consumer.retry.max_backoff, 30s);
  ASSERT_EQ(c.renamed_warnings.size(), 1U);
  EXPECT_TRUE(contains(c.renamed_warnings[0],
                       "consumer.retry_max_ms (flag --set) is the old name of consumer.retry_max"))
      << c.renamed_warnings[0];
}

TEST(RenamedKeys, AnOldFlagStillWorksWithAWarningNamingTheNewFlag) {
  ConfigSources sources;
  sources.flags = {{"relay.retention", "48h", "--retention-hours", "--retention"}};
  const Config c = load_config(sources, schema());
  EXPECT_EQ(c.relay.retention, 48h);
  EXPECT_EQ(c.entry("relay.retention")->origin.describe(), "flag --retention-hours");
  ASSERT_EQ(c.renamed_warnings.size(), 1U);
  EXPECT_TRUE(contains(c.renamed_warnings[0],
                       "flag --retention-hours is the old name of --retention (relay.retention)"))
      << c.renamed_warnings[0];
}

TEST(RenamedKeys, OneOldNameUsedInTwoLayersWarnsOnceNamingTheLayerThatWon) {
  ConfigSources sources;
  sources.file = write_toml("[relay]\npoll_interval_ms = 100\n");
  sources.environment = {{"IDEM_RELAY_POLL_INTERVAL_MS", "200"}};
  const Config c = load_config(sources, schema());
  EXPECT_EQ(c.relay.poll_interval, 200ms);
  ASSERT_EQ(c.renamed_warnings.size(), 1U);
  EXPECT_TRUE(contains(c.renamed_warnings[0], "env IDEM_RELAY_POLL_INTERVAL_MS"))
      << c.renamed_warnings[0];
}

struct BothNames {
  std::string name;
  ConfigSources sources;
  std::string key;
  std::string message;  ///< a substring of the one problem's message
};

std::vector<BothNames> both_names_cases() {
  ConfigSources file;
  file.file = write_toml("[relay]\nretention = \"2d\"\nretention_hours = 48\n");
  ConfigSources file_and_env;
  file_and_env.file = write_toml("[consumer]\nbatch_window = \"20ms\"\n");
  file_and_env.environment = {{"IDEM_CONSUMER_BATCH_WINDOW_MS", "30"}};
  ConfigSources env_and_set;
  env_and_set.environment = {{"IDEM_STORE_BUSY_TIMEOUT", "1s"}};
  env_and_set.flags = {{"store.busy_timeout_ms", "2000", "--set"}};
  ConfigSources old_and_new_flag;
  old_and_new_flag.flags = {{"relay.retention", "48h", "--retention"},
                            {"relay.retention", "24", "--retention-hours", "--retention"}};
  return {
      {"InOneFile", file, "relay.retention",
       "also set as its old name relay.retention_hours (file " + file.file + ":3)"},
      {"InTheFileAndTheEnvironment", file_and_env, "consumer.batch_window",
       "also set as its old name consumer.batch_window_ms (env "
       "IDEM_CONSUMER_BATCH_WINDOW_MS): set only consumer.batch_window"},
      {"InTheEnvironmentAndWithSet", env_and_set, "store.busy_timeout",
       "also set as its old name store.busy_timeout_ms (flag --set)"},
      {"AsTheOldAndTheNewFlag", old_and_new_flag, "relay.retention",
       "--retention and its old name --retention-hours both given: give only --retention"},
  };
}

class RenamedKeysBothNames : public testing::TestWithParam<BothNames> {};

TEST_P(RenamedKeysBothNames, IsAnErrorNamingBoth) {
  const BothNames& c = GetParam();
  const std::vector<ConfigProblem> problems = problems_of(c.sources);
  ASSERT_EQ(problems.size(), 1U);
  EXPECT_EQ(problems[0].key, c.key);
  EXPECT_TRUE(contains(problems[0].message, c.message)) << problems[0].message;
}

INSTANTIATE_TEST_SUITE_P(EveryLayer, RenamedKeysBothNames, testing::ValuesIn(both_names_cases()),
                         [](const auto& param_info) { return param_info.param.name; });

TEST(RenamedKeys, AnOldNameThatIsAlsoAKeyIsRefusedBySchema) {
  struct Clash {
    std::chrono::milliseconds a{0};
    std::chrono::milliseconds b{0};
  };
  ConfigSchema clash;
  EXPECT_THROW(clash.add<Clash>(+[](SectionKeys<Clash>& keys) {
    keys.duration("clash.a", &Clash::a, "a", 0, kConfigDay)
        .duration("clash.b", &Clash::b, "b", 0, kConfigDay)
        .renamed_from("clash.a");
  }),
               Error);
  ConfigSchema renamed_twice;
  EXPECT_THROW(renamed_twice.add<Clash>(+[](SectionKeys<Clash>& keys) {
    keys.duration("clash.a", &Clash::a, "a", 0, kConfigDay)
        .renamed_from("clash.old")
        .duration("clash.b", &Clash::b, "b", 0, kConfigDay)
        .renamed_from("clash.old");
  }),
               Error);
}

// The source tree: the docs sit beside the build directory's parent (build-*/tests).
std::filesystem::path source_root() {
  for (std::filesystem::path at = IDEM_TEST_CHILD_DIR; !at.empty() && at != at.root_path();
       at = at.parent_path()) {
    if (std::filesystem::exists(at / "docs" / "operations.md") &&
        std::filesystem::exists(at / "src" / "config"))
      return at;
  }
  return {};
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// docs/operations.md lists each old name in its section on renamed keys, with the new
// name, and names only the new key everywhere else, as the README does.
TEST(RenamedKeys, TheDocsNameTheNewKeysAndTheOldOnesOnlyAsRenamed) {
  const std::filesystem::path root = source_root();
  if (root.empty()) GTEST_SKIP() << "no source tree above " << IDEM_TEST_CHILD_DIR;
  const std::string operations = read_text(root / "docs" / "operations.md");
  const std::string heading = "#### Renamed keys and flags";
  const std::size_t start = operations.find(heading);
  ASSERT_NE(start, std::string::npos) << heading << " not in docs/operations.md";
  const std::size_t end = std::min(operations.find("\n### ", start), operations.size());
  const std::string renamed = operations.substr(start, end - start);
  const std::string elsewhere = operations.substr(0, start) + operations.substr(end);
  const std::string readme = read_text(root / "README.md");
  for (const auto& [old_name, new_name] : renamed_keys()) {
    EXPECT_EQ(count_of(renamed, "| `" + old_name + "` | `" + new_name + "` |"), 1U)
        << old_name << " -> " << new_name << ": no row in " << heading;
    EXPECT_GE(count_of(elsewhere, "`" + new_name + "`"), 1U)
        << new_name << ": not in the keys of docs/operations.md";
    EXPECT_EQ(count_of(elsewhere, old_name), 0U)
        << old_name << ": docs/operations.md names it outside " << heading;
    EXPECT_EQ(count_of(readme, old_name), 0U) << old_name << ": the README names the old key";
  }
}

}  // namespace config_renamed_test
}  // namespace idem
