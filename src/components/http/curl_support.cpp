#include "http/curl_support.hpp"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/http/circuit_breaker.hpp"

namespace idem::http::detail {

void init_curl_once() {
  static std::once_flag once;
  static CURLcode result = CURLE_OK;
  std::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (result != CURLE_OK) {
    throw Error(ErrorCode::Internal, ErrorSource::Http,
                fmt::format("curl_global_init failed: {}", curl_easy_strerror(result)));
  }
}

void validate_header_name(std::string_view name) {
  if (name.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Http, "a header name is empty");
  }
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f || c == ':') {
      throw Error(
          ErrorCode::InvalidArgument, ErrorSource::Http,
          fmt::format("header name {:?} contains a space, colon or control character", name));
    }
  }
}

void validate_header_value(std::string_view name, std::string_view value) {
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 && c != '\t') {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Http,
                  fmt::format("header {} contains a control character (CR, LF or other) "
                              "at position {}",
                              name, value.find(c)));
    }
    if (u == 0x7f) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Http,
                  fmt::format("header {} contains DEL", name));
    }
  }
}

void append_header(HeaderList& list, std::string_view name, std::string_view value) {
  const std::string line = fmt::format("{}: {}", name, value);
  // Appends in place and returns the head: a new one only for an empty list.
  curl_slist* head = curl_slist_append(list.get(), line.c_str());
  if (head == nullptr) throw std::bad_alloc();
  if (!list) list.reset(head);
}

namespace {

// One part of a parsed URL; the port is the scheme's default when the URL has none.
std::string url_part(CURLU* url, CURLUPart part) {
  char* text = nullptr;
  if (curl_url_get(url, part, &text, CURLU_DEFAULT_PORT) != CURLUE_OK || text == nullptr) return {};
  std::string copy(text);
  curl_free(text);
  return copy;
}

}  // namespace

namespace {

// The URL parsed, or why libcurl (or idem: http and https only) refuses it.
std::pair<Url, std::string> parsed_http_url(const std::string& url) {
  Url parsed(curl_url());
  if (!parsed) throw std::bad_alloc();
  // CURLU_GUESS_SCHEME: like CURLOPT_URL, "host/path" means http. CURLU_PATH_AS_IS: the
  // path is sent as written, dot segments included (libcurl would otherwise resolve
  // `/a/../b` to `/b`, a path the caller did not write).
  if (const CURLUcode code = curl_url_set(parsed.get(), CURLUPART_URL, url.c_str(),
                                          CURLU_GUESS_SCHEME | CURLU_PATH_AS_IS);
      code != CURLUE_OK) {
    return {nullptr, curl_url_strerror(code)};
  }
  std::string scheme = url_part(parsed.get(), CURLUPART_SCHEME);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (scheme != "http" && scheme != "https") return {nullptr, "only http and https are supported"};
  return {std::move(parsed), std::string()};
}

}  // namespace

Url parse_http_url(const std::string& url) {
  auto [parsed, why] = parsed_http_url(url);
  if (!parsed)
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Http,
                fmt::format("cannot send to the URL: {}", why));
  return std::move(parsed);
}

std::string host_of(CURLU* url) {
  return fmt::format("{}://{}:{}", url_part(url, CURLUPART_SCHEME), url_part(url, CURLUPART_HOST),
                     url_part(url, CURLUPART_PORT));
}

}  // namespace idem::http::detail

namespace idem::http {

std::optional<std::string> url_problem(const std::string& url) {
  auto [parsed, why] = detail::parsed_http_url(url);
  if (parsed) return std::nullopt;
  return why;
}

std::string endpoint_of(std::string_view url) {
  const detail::Url parsed = detail::parse_http_url(std::string(url));
  return detail::host_of(parsed.get());
}

}  // namespace idem::http

namespace idem::http::detail {

std::size_t append_body(char* data, std::size_t size, std::size_t count, void* out) noexcept {
  try {
    static_cast<std::string*>(out)->append(data, size * count);
    return size * count;
  } catch (...) {
    return 0;
  }
}

std::size_t append_header_line(char* data, std::size_t size, std::size_t count,
                               void* out) noexcept {
  const std::size_t n = size * count;
  try {
    auto& headers = *static_cast<std::vector<std::pair<std::string, std::string>>*>(out);
    std::string_view line(data, n);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    if (line.starts_with("HTTP/")) {
      headers.clear();
      return n;
    }
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return n;
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
    return n;
  } catch (...) {
    return 0;
  }
}

}  // namespace idem::http::detail
