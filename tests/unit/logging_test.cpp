// Structured log lines: level filter, plain and JSON formats, record fields with the
// trace id, secrets redacted.
#include "idem/logging.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace idem {
namespace logging_test {

struct Captured {
  std::vector<std::string> lines;
  Logger::Sink sink() {
    return [this](std::string_view l) { lines.emplace_back(l); };
  }
};

TEST(Logger, FiltersByLevelAndWritesPlainKeyValues) {
  Captured out;
  const Logger log(LogSettings{LogLevel::Info, LogFormat::Plain}, out.sink());
  log.log(LogLevel::Debug, "consumer", "per-message detail");
  log.log(LogLevel::Warn, "consumer", "dead-lettered",
          {{"topic", "orders"},
           {"reason", "validation.invalid_json"},
           {"note", "two words"},
           {"sasl.password", "hunter2"}});
  ASSERT_EQ(out.lines.size(), 1U);
  const std::string& line = out.lines[0];
  EXPECT_NE(line.find(" warn consumer: dead-lettered topic=orders reason=validation.invalid_json "
                      "note=\"two words\" sasl.password=<redacted>"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("hunter2"), std::string::npos);
  EXPECT_EQ(line[4], '-');  // starts with an RFC 3339 timestamp
  EXPECT_EQ(line.find('Z'), 23U);
}

TEST(Logger, JsonLinesCarryRecordFieldsAndTheTraceId) {
  Captured out;
  const Logger log(LogSettings{LogLevel::Debug, LogFormat::Json}, out.sink());
  const RecordHeader headers[] = {
      {"event_id", "01890a5d-ac96-774b-bcce-b302099a8057"},
      {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}};
  RecordInfo record;
  record.topic = "orders";
  record.partition = 2;
  record.offset = 41;
  record.headers = headers;
  log.log(LogLevel::Error, "consumer", "handler \"failed\"", record_fields(record));
  ASSERT_EQ(out.lines.size(), 1U);
  const auto j = nlohmann::json::parse(out.lines[0]);
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["component"], "consumer");
  EXPECT_EQ(j["msg"], "handler \"failed\"");
  EXPECT_EQ(j["topic"], "orders");
  EXPECT_EQ(j["partition"], "2");
  EXPECT_EQ(j["offset"], "41");
  EXPECT_EQ(j["event_id"], "01890a5d-ac96-774b-bcce-b302099a8057");
  EXPECT_EQ(j["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
}

TEST(Logger, LineSinkAdaptsFreeTextFromTheLibrary) {
  Captured out;
  const Logger log(LogSettings{LogLevel::Warn, LogFormat::Plain}, out.sink());
  const auto consumer_log = log.lines("consumer");
  consumer_log("idem consumer: batch of 3 record(s) not committed");
  const auto chatter = log.lines("kafka", LogLevel::Info);
  chatter("librdkafka connected");  // below the level: dropped
  ASSERT_EQ(out.lines.size(), 1U);
  EXPECT_NE(out.lines[0].find("warn consumer: idem consumer: batch of 3"), std::string::npos);
}

}  // namespace logging_test
}  // namespace idem
