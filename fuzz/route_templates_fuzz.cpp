// libFuzzer target: the templates of a configured HTTP route (URL, headers, body) with any
// values, through the reader the consumer runs (EventReader: the event's JSON, a Kafka
// header). Its contract: an event is refused (a ValidationError), or its request has the
// route's own method, scheme, host, port and path prefix, each value in its place and
// nowhere else (the path's segments are the template's, none `.`, `..` or empty after a
// server's normalization; the query's parameters are the template's), header values a
// client can send, and a body that parses as JSON with the values in place.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/curl_support.hpp"
#include "idem/sinks/sink_config.hpp"
#include "idem/timestamp.hpp"
#include "sinks/event_reader.hpp"
#include "sinks/param_values.hpp"

// The one member of idem::Param defined in src/stores/store.cpp, which brings the stores
// with it: this target binds no value, it only renders them.
idem::Param::Param(Timestamp v) : value_(format_rfc3339(v)) {}

namespace {

using idem::sinks::detail::json_string;

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "route_templates_fuzz: %s\n", what.c_str());
  std::abort();
}

constexpr std::string_view kRoute = R"toml(
[routes.charge]
topic = "orders"
type = "order.confirmed.v1"
[routes.charge.params]
account = { from = "/account", type = "text" }
tenant = { from = "kafka.header.tenant", type = "text" }
amount = { from = "/amount", type = "numeric", precision = 18, scale = 2 }
n = { from = "/n", type = "integer", required = false }
meta = { from = "/meta", type = "json", required = false }
[routes.charge.http]
method = "PUT"
url = "https://route.example:8443/v1/accounts/{account}/t-{tenant}/{tenant}{account}?a={account}&t={tenant}"
headers = { X-Account = "acct {account}", X-Tenant = "{tenant}" }
body = '{"account": {account}, "tenant": {tenant}, "amount": {amount}, "n": {n}, "meta": {meta}}'
)toml";

struct Subject {
  idem::sinks::SinkConfig config;
  idem::sinks::detail::CompiledRoute route;
  std::unique_ptr<idem::sinks::detail::EventReader> reader;
};

Subject& subject() {
  static Subject* made = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string path =
        std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/idem-templates-fuzz-XXXXXX";
    const int fd = mkstemp(path.data());
    if (fd < 0) broken("cannot create a temporary file");
    if (write(fd, kRoute.data(), kRoute.size()) != static_cast<ssize_t>(kRoute.size()))
      broken("short write");
    close(fd);
    auto* s = new Subject;  // lives as long as the process: the reader points into it
    s->config = *idem::sinks::load_sink_config(path, {});
    std::remove(path.c_str());
    s->route.config = &s->config.routes[0];
    s->reader = std::make_unique<idem::sinks::detail::EventReader>(
        "orders", s->config.topics.at("orders"),
        std::vector<const idem::sinks::detail::CompiledRoute*>{&s->route}, idem::Backend::Sqlite);
    return s;
  }();
  return *made;
}

std::string url_part(CURLU* url, CURLUPart part) {
  char* text = nullptr;
  if (curl_url_get(url, part, &text, 0) != CURLUE_OK || text == nullptr) return {};
  std::string copy(text);
  curl_free(text);
  return copy;
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

std::string percent_decoded(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::vector<std::string> split(std::string_view s, char by) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (true) {
    const std::size_t next = s.find(by, at);
    out.emplace_back(s.substr(at, next == std::string_view::npos ? s.npos : next - at));
    if (next == std::string_view::npos) return out;
    at = next + 1;
  }
}

void check_request(const idem::http::Request& r, const std::string& account,
                   const std::string& tenant) {
  if (r.method != "PUT") broken("the method is not the route's");
  idem::http::detail::Url url = idem::http::detail::parse_http_url(r.url);
  if (url_part(url.get(), CURLUPART_SCHEME) != "https" ||
      url_part(url.get(), CURLUPART_HOST) != "route.example" ||
      url_part(url.get(), CURLUPART_PORT) != "8443")
    broken("the scheme, host or port is not the route's: " + r.url);
  if (!url_part(url.get(), CURLUPART_FRAGMENT).empty()) broken("a fragment appeared: " + r.url);
  // The path as a server reads it: segments split on `/`, each percent-decoded.
  const std::string path = url_part(url.get(), CURLUPART_PATH);
  const std::vector<std::string> segments = split(path, '/');
  const std::vector<std::string> expected = {"",      "v1",          "accounts",
                                             account, "t-" + tenant, tenant + account};
  if (segments.size() != expected.size()) broken("the path's segments changed: " + path);
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const std::string decoded = percent_decoded(segments[i]);
    if (decoded != expected[i]) broken("a segment is not its value: " + path);
    std::string dots;
    for (std::size_t k = 0; k < segments[i].size(); ++k) {
      const bool encoded_dot =
          segments[i].compare(k, 3, "%2E") == 0 || segments[i].compare(k, 3, "%2e") == 0;
      dots.push_back(encoded_dot ? '.' : segments[i][k]);
      if (encoded_dot) k += 2;
    }
    if (i > 0 && (dots.empty() || dots == "." || dots == ".."))
      broken("a segment a server would resolve or merge: " + path);
  }
  const std::vector<std::string> query = split(url_part(url.get(), CURLUPART_QUERY), '&');
  if (query.size() != 2 || query[0].rfind("a=", 0) != 0 || query[1].rfind("t=", 0) != 0 ||
      percent_decoded(query[0].substr(2)) != account ||
      percent_decoded(query[1].substr(2)) != tenant)
    broken("the query's parameters changed: " + r.url);

  if (r.extra_headers.size() != 2 || r.extra_headers[0].first != "X-Account" ||
      r.extra_headers[0].second != "acct " + account || r.extra_headers[1].first != "X-Tenant" ||
      r.extra_headers[1].second != tenant)
    broken("a header is not its value");
  for (const auto& [name, value] : r.extra_headers) {
    try {
      idem::http::detail::validate_header_value(name, value);
    } catch (const std::exception& e) {
      broken(std::string("a header the client refuses: ") + e.what());
    }
  }
}

// `meta`: the JSON value the event held under /meta, or null when it held none.
void check_body(const std::string& body, const std::string& account, const std::string& tenant,
                const std::optional<std::int64_t>& n, const nlohmann::json& meta,
                bool compare_meta) {
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, false);  // [] of a missing key: null
  if (doc.is_discarded() || !doc.is_object() || doc.size() != 5)
    broken("the body is not the template's JSON object: " + body);
  if (doc["account"] != account || doc["tenant"] != tenant)
    broken("a body value is not in place: " + body);
  if (!doc["amount"].is_string()) broken("the amount is not a decimal string: " + body);
  if (n ? doc["n"] != *n : !doc["n"].is_null()) broken("n is not in place: " + body);
  if (meta.is_null() != doc["meta"].is_null() || (compare_meta && doc["meta"] != meta))
    broken("meta is not in place: " + body);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string account = in.ConsumeRandomLengthString(64);
  const std::string tenant = in.ConsumeRandomLengthString(64);
  // Mostly a decimal the route takes, so that most inputs reach the templates.
  const std::string amount =
      in.ConsumeBool() ? in.ConsumeRandomLengthString(24)
                       : std::to_string(in.ConsumeIntegralInRange<int>(-99999, 99999)) + ".5";
  std::optional<std::int64_t> n;
  if (in.ConsumeBool()) n = in.ConsumeIntegral<std::int64_t>();
  const std::string meta_text = in.ConsumeRemainingBytesAsString();
  nlohmann::json meta = nlohmann::json::parse(meta_text, nullptr, false);
  if (meta.is_discarded()) meta = nullptr;
  // Numbers are compared only as text both parsers agree on: none.
  const bool compare_meta = meta_text.find_first_of("0123456789") == std::string::npos;

  std::string payload = R"({"event_id":"0190b5d2-7a1c-7cc3-9a4e-6f3a1d2b9c10",)"
                        R"("event_type":"order.confirmed.v1","account":)" +
                        json_string(account) + R"(,"amount":)" + json_string(amount);
  if (n) payload += R"(,"n":)" + std::to_string(*n);
  if (!meta.is_null()) payload += R"(,"meta":)" + meta_text;
  payload += "}";
  const std::vector<idem::RecordHeader> headers = {{"tenant", tenant}};
  idem::RecordInfo record;
  record.topic = "orders";
  record.payload = payload;
  record.headers = headers;
  record.consumer_group = "g";

  Subject& s = subject();
  const idem::Validated<idem::sinks::detail::SinkEvent> read =
      s.reader->read(record, idem::ParseLimits{});
  if (!read.ok()) {
    if (read.error().message.empty()) broken("a refusal without a message");
    return 0;
  }
  const idem::sinks::detail::SinkEvent& event = read.value();
  if (!event.request) broken("an event of the route without its request");
  check_request(*event.request, account, tenant);
  check_body(event.request->body, account, tenant, n, meta, compare_meta);
  return 0;
}
