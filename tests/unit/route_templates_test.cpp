// The templates of a configured HTTP route: no inserted value can add, remove or rewrite
// a segment of the URL's path, or reach its host; libcurl sends the path as written; a
// URL or header the route itself gets wrong (an expanded secret with a newline) is a
// configuration error naming the key and never the value; a request the client refuses
// at send time pauses the route instead of dead-lettering the stream; reasons never
// carry a value of ${VAR}.
#include <gtest/gtest.h>
#include <httplib.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "idem/http/async_client.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/uuid.hpp"
#include "sinks/event_reader.hpp"
#include "sinks/param_values.hpp"
#include "sinks/route_call.hpp"
#include "support/wait.hpp"
#include "support/waited_completion.hpp"

namespace idem::sinks {
namespace route_templates_test {

using namespace std::chrono_literals;

std::string write_file(const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / test::unique_name("templates");
  std::filesystem::create_directories(dir);
  const auto path = dir / "r.toml";
  std::ofstream(path) << text;
  return path.string();
}

std::string messages(const ConfigError& e) {
  std::string out;
  for (const auto& p : e.problems()) out += fmt::format("{}: {}\n", p.key, p.message);
  return out;
}

// The problems of loading `toml`, or "" when it loads.
std::string problems_of(const std::string& toml,
                        const std::vector<std::pair<std::string, std::string>>& env = {}) {
  try {
    (void)load_sink_config(write_file(toml), env);
    return {};
  } catch (const ConfigError& e) {
    return messages(e);
  }
}

std::string route_with(std::string_view url, std::string_view headers = "{}") {
  return fmt::format(R"toml(
[routes.charge]
topic = "orders"
type = "order.confirmed.v1"
[routes.charge.params]
a = {{ from = "/a", type = "text" }}
b = {{ from = "/b", type = "text", required = false }}
[routes.charge.http]
url = "{}"
headers = {}
)toml",
                     url, headers);
}

/// Reads events of topic "orders" with one route.
class Templates : public ::testing::Test {
 protected:
  void use(const std::string& toml,
           const std::vector<std::pair<std::string, std::string>>& env = {}) {
    config_ = *load_sink_config(write_file(toml), env);
    route_.config = &config_.routes[0];
    reader_ = std::make_unique<detail::EventReader>(
        "orders", config_.topics.at("orders"), std::vector<const detail::CompiledRoute*>{&route_},
        Backend::Sqlite);
  }

  Validated<detail::SinkEvent> read(const std::string& a, const std::string& b = "x") {
    payload_ =
        fmt::format(R"({{"event_id":"{}","event_type":"order.confirmed.v1","a":{},"b":{}}})",
                    new_uuid_v7().to_string(), detail::json_string(a), detail::json_string(b));
    RecordInfo info;
    info.topic = "orders";
    info.payload = payload_;
    info.consumer_group = "g";
    return reader_->read(info, ParseLimits{});
  }

  SinkConfig config_;
  detail::CompiledRoute route_;
  std::unique_ptr<detail::EventReader> reader_;
  std::string payload_;
};

TEST_F(Templates, AValueCannotMakeAPathSegmentDotDotDotOrEmpty) {
  use(route_with("https://provider.example/accounts/{a}/charges?note={b}"));
  for (const std::string refused : {"..", ".", ""}) {
    const auto e = read(refused);
    ASSERT_FALSE(e.ok()) << "'" << refused << "' accepted: " << e.value().request->url;
    EXPECT_EQ(e.error().reason, ValidationReason::UrlSegment) << e.error().message;
    EXPECT_NE(e.error().message.find("$a"), std::string::npos) << e.error().message;
    EXPECT_EQ(e.error().message.find("provider.example"), std::string::npos)
        << "the URL may hold a secret: " << e.error().message;
  }
  // Inside a segment, or in the query, the same characters are plain text.
  for (const auto& [a, url] : std::vector<std::pair<std::string, std::string>>{
           {"...", "https://provider.example/accounts/.../charges?note=.."},
           {"../x", "https://provider.example/accounts/..%2Fx/charges?note=.."},
           {"%2E%2E", "https://provider.example/accounts/%252E%252E/charges?note=.."},
           {"a?b#c", "https://provider.example/accounts/a%3Fb%23c/charges?note=.."}}) {
    const auto e = read(a, "..");
    ASSERT_TRUE(e.ok()) << a << ": " << e.error().message;
    EXPECT_EQ(e.value().request->url, url);
  }
}

TEST_F(Templates, ValuesSharingASegmentAreCheckedTogether) {
  use(route_with("http://h/v1/{a}{b}/x/%2e{b}"));
  EXPECT_EQ(read(".", ".").error().reason, ValidationReason::UrlSegment);
  EXPECT_EQ(read("", "").error().reason, ValidationReason::UrlSegment);
  // `%2e` in the file is a dot as a server reads it: with `.` it makes `..`.
  const auto encoded = read("a", ".");
  ASSERT_FALSE(encoded.ok());
  EXPECT_EQ(encoded.error().reason, ValidationReason::UrlSegment);
  EXPECT_NE(encoded.error().message.find("$b"), std::string::npos) << encoded.error().message;
  EXPECT_TRUE(read(".", "b").ok());
}

TEST(TemplateConfig, AValueCannotGoIntoTheHostOrPort) {
  EXPECT_NE(problems_of(route_with("https://{a}.example/x")).find("before the URL's path"),
            std::string::npos);
  EXPECT_NE(problems_of(route_with("https://h.example:{a}/x")).find("before the URL's path"),
            std::string::npos);
  EXPECT_NE(problems_of(route_with("h.example{a}/x")).find("before the URL's path"),
            std::string::npos);
  EXPECT_EQ(problems_of(route_with("https://h.example/{a}?x={b}")), "");
  EXPECT_EQ(problems_of(route_with("https://h.example?x={b}")), "");
}

TEST(TemplateConfig, AUrlOrHeaderTheRouteGetsWrongIsRefusedWithoutShowingTheSecret) {
  const std::string header = route_with("${URL}/x/{a}", R"({ Authorization = "Bearer ${TOKEN}" })");
  const std::string newline =
      problems_of(header, {{"URL", "https://h.example"}, {"TOKEN", "s3cr3t\n"}});
  EXPECT_NE(newline.find("routes.charge.http.headers.Authorization: the value of the environment "
                         "variable TOKEN has a line feed (LF) at its end"),
            std::string::npos)
      << newline;
  EXPECT_EQ(newline.find("s3cr3t"), std::string::npos) << newline;

  const std::string url = problems_of(header, {{"URL", "gopher://s3cr3t.example"}, {"TOKEN", "t"}});
  EXPECT_NE(url.find("routes.charge.http.url: libcurl cannot send to this URL"), std::string::npos)
      << url;
  EXPECT_EQ(url.find("s3cr3t"), std::string::npos) << url;

  const std::string in_url =
      problems_of(header, {{"URL", "https://h.example/s3cr3t\r"}, {"TOKEN", "t"}});
  EXPECT_NE(in_url.find("URL has a carriage return (CR) at its end"), std::string::npos) << in_url;
  EXPECT_EQ(in_url.find("s3cr3t"), std::string::npos) << in_url;

  const std::string written = problems_of(route_with("https://h.example/x", R"({ X-A = "a\nb" })"));
  EXPECT_NE(written.find("routes.charge.http.headers.X-A: has a line feed (LF) at position 2 of 3"),
            std::string::npos)
      << written;
  EXPECT_EQ(problems_of(header, {{"URL", "https://h.example"}, {"TOKEN", "t\tu"}}), "");
}

/// A loopback endpoint answering every request with `status` and `body`, recording
/// the request targets it received as sent.
class Endpoint {
 public:
  Endpoint(int status, std::string body) : status_(status), body_(std::move(body)) {
    const auto handle = [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard lock(mutex_);
        targets_.push_back(req.target);
      }
      res.status = status_;
      res.set_content(body_, "application/problem+json");
    };
    server_.Post(".*", handle);
    // One request per connection: stop() then never waits out a kept-alive connection.
    server_.set_keep_alive_max_count(1);
    port_ = server_.bind_to_any_port("127.0.0.1");
    serving_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~Endpoint() {
    server_.stop();
    serving_.join();
  }
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  [[nodiscard]] int port() const { return port_; }
  std::vector<std::string> targets() {
    std::lock_guard lock(mutex_);
    return targets_;
  }

 private:
  int status_;
  std::string body_;
  httplib::Server server_;
  std::thread serving_;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<std::string> targets_;
};

class TemplateCalls : public Templates {
 protected:
  /// Starts the call of an event with value `a` on `calls` and waits for its outcome.
  std::pair<std::optional<Outcome>, std::string> call(detail::RouteCalls& calls,
                                                      const std::string& a) {
    Validated<detail::SinkEvent> e = read(a);
    EXPECT_TRUE(e.ok()) << e.error().message;
    events_.push_back(std::make_unique<detail::SinkEvent>(std::move(e).value()));
    auto completion = std::make_shared<test::WaitedCompletion>();
    calls.start(client_, *events_.back(), test::completion_into<detail::CallAnswer>(completion));
    const auto outcome = completion->wait();
    return {outcome, completion->reason()};
  }

  SinkObservers observers_;
  http::AsyncClient client_;
  std::vector<std::unique_ptr<detail::SinkEvent>> events_;
};

TEST_F(TemplateCalls, TheRoutesOwnPathIsSentAsWritten) {
  Endpoint endpoint(200, "{}");
  use(route_with(fmt::format("http://127.0.0.1:{}/v1/../v2/./{{a}}", endpoint.port())));
  detail::RouteCalls calls(config_.routes[0], Backend::Sqlite, observers_);
  EXPECT_EQ(call(calls, "x").first, Outcome::Done);
  EXPECT_EQ(endpoint.targets(), std::vector<std::string>{"/v1/../v2/./x"});
}

TEST_F(TemplateCalls, ARequestTheClientRefusesPausesTheRouteInsteadOfDeadLettering) {
  use(route_with("http://127.0.0.1:1/{a}", R"({ Authorization = "Bearer ${TOKEN}" })"),
      {{"TOKEN", "s3cr3t"}});
  // What load_sink_config refuses at start, as if it got past: a header the client refuses.
  config_.routes[0].http->headers.emplace_back(
      "X-Broken", Template{{{"s3cr3t\n", 0, false}}, true, {"s3cr3t\n"}});
  std::vector<std::pair<std::string, bool>> paused;
  observers_.on_pause = [&](const std::string& route, bool now) {
    paused.emplace_back(route, now);
  };
  std::vector<std::string> logged;
  observers_.log = [&](std::string_view line) { logged.emplace_back(line); };
  detail::RouteCalls calls(config_.routes[0], Backend::Sqlite, observers_);
  const auto [outcome, reason] = call(calls, "x");
  EXPECT_EQ(outcome, Outcome::Retry) << reason;
  EXPECT_NE(calls.paused_reason().find("X-Broken"), std::string::npos) << calls.paused_reason();
  EXPECT_EQ(paused, (std::vector<std::pair<std::string, bool>>{{"charge", true}}));
  ASSERT_EQ(logged.size(), 1U);
  EXPECT_NE(logged[0].find("route charge paused"), std::string::npos) << logged[0];
  for (const std::string& text : {reason, calls.paused_reason(), logged[0]})
    EXPECT_EQ(text.find("s3cr3t"), std::string::npos) << text;
}

TEST_F(TemplateCalls, AReasonNeverCarriesASecret) {
  // The provider echoes the token in its refusal.
  Endpoint endpoint(422, R"({"title": "token s3cr3t-token for this hook refused"})");
  use(route_with("${URL}/{a}", R"({ Authorization = "Bearer ${TOKEN}" })"),
      {{"URL", fmt::format("http://127.0.0.1:{}/hooks/s3cr3t-path", endpoint.port())},
       {"TOKEN", "s3cr3t-token"}});
  detail::RouteCalls calls(config_.routes[0], Backend::Sqlite, observers_);
  const auto [outcome, reason] = call(calls, "x");
  EXPECT_EQ(outcome, Outcome::DeadLetter) << reason;
  EXPECT_NE(reason.find("422"), std::string::npos) << reason;
  EXPECT_NE(reason.find("token <redacted> for"), std::string::npos) << reason;
  EXPECT_EQ(reason.find("s3cr3t"), std::string::npos) << reason;
}

}  // namespace route_templates_test
}  // namespace idem::sinks
