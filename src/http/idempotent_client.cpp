#include "idem/http/idempotent_client.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "retry/backoff.hpp"
#include "idem/error.hpp"
#include "idem/uuid.hpp"

namespace idem::http {

namespace {

// curl_global_init is not thread-safe; the first client of the process runs it once.
void init_curl_once() {
  static std::once_flag once;
  static CURLcode result = CURLE_OK;
  std::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (result != CURLE_OK) {
    throw Error(ErrorCode::Internal, ErrorSource::Http,
                fmt::format("curl_global_init failed: {}", curl_easy_strerror(result)));
  }
}

void validate_header_value(std::string_view name, std::string_view value) {
  for (const char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 && c != '\t') {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Http,
                  fmt::format("header {} contains a control character (CR, LF or other) "
                              "at position {}", name, value.find(c)));
    }
    if (u == 0x7f) {
      throw Error(ErrorCode::InvalidArgument, ErrorSource::Http,
                  fmt::format("header {} contains DEL", name));
    }
  }
}

// Status codes worth another attempt with the same key: 409 means the provider still
// processes the first attempt, 429 asks us to slow down, 5xx is the server's trouble.
bool retryable_status(long status) { return status == 409 || status == 429 || status >= 500; }

// Errors that are the caller's bug, not the network's: retrying cannot help.
bool unusable_url(CURLcode code) {
  return code == CURLE_URL_MALFORMAT || code == CURLE_UNSUPPORTED_PROTOCOL;
}

std::size_t append_body(char* data, std::size_t size, std::size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

struct SlistDeleter {
  void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};
using Slist = std::unique_ptr<curl_slist, SlistDeleter>;

void append_header(Slist& list, std::string_view name, std::string_view value) {
  const std::string line = fmt::format("{}: {}", name, value);
  // Appends in place and returns the head: a new one only for an empty list.
  curl_slist* head = curl_slist_append(list.get(), line.c_str());
  if (head == nullptr) throw std::bad_alloc();
  if (!list) list.reset(head);
}

}  // namespace

void validate_idempotency_key(std::string_view key) {
  if (key.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Http, "Idempotency-Key is empty");
  }
  if (key.size() > kMaxIdempotencyKeyLength) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Http,
                fmt::format("Idempotency-Key is {} characters long; at most {} are allowed",
                            key.size(), kMaxIdempotencyKeyLength));
  }
  validate_header_value("Idempotency-Key", key);
}

struct IdempotentClient::Impl {
  explicit Impl(ClientConfig c) : config(std::move(c)), backoff(config.retry) {}
  ~Impl() {
    if (curl != nullptr) curl_easy_cleanup(curl);
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ClientConfig config;
  detail::Backoff backoff;
  CURL* curl = nullptr;  // one handle, reused: keeps the connection alive between calls
};

IdempotentClient::IdempotentClient(ClientConfig config) {
  if (config.max_attempts < 1) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "http client: max_attempts must be >= 1");
  }
  if (config.connect_timeout.count() <= 0 || config.total_timeout.count() <= 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "http client: connect_timeout and total_timeout must be positive");
  }
  if (config.max_retry_after.count() < 0) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Config,
                "http client: max_retry_after must not be negative");
  }
  init_curl_once();
  impl_ = std::make_unique<Impl>(std::move(config));
  impl_->curl = curl_easy_init();
  if (impl_->curl == nullptr) {
    throw Error(ErrorCode::Internal, ErrorSource::Http, "curl_easy_init failed");
  }
}

IdempotentClient::~IdempotentClient() = default;

CallResult IdempotentClient::post_json(
    const std::string& url, std::string_view json_body, std::string_view idempotency_key,
    const std::vector<std::pair<std::string, std::string>>& extra_headers) {
  validate_idempotency_key(idempotency_key);
  for (const auto& [name, value] : extra_headers) validate_header_value(name, value);

  const ClientConfig& cfg = impl_->config;
  CURL* curl = impl_->curl;
  CallResult result;
  for (int attempt = 1; attempt <= cfg.max_attempts; ++attempt) {
    result.attempts = attempt;
    Slist headers;
    append_header(headers, "Content-Type", "application/json");
    append_header(headers, "Idempotency-Key",
                  cfg.send_idempotency_key ? std::string(idempotency_key)
                                           : new_uuid_v7().to_string());
    for (const auto& [name, value] : extra_headers) append_header(headers, name, value);

    std::string body;
    curl_easy_reset(curl);  // keeps the connection cache, clears the options
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json_body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(json_body.size()));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(cfg.connect_timeout.count()));
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(cfg.total_timeout.count()));
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM (threads)
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &append_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);

    const CURLcode code = curl_easy_perform(curl);
    std::chrono::milliseconds retry_after{0};
    if (code != CURLE_OK) {
      if (unusable_url(code)) {
        throw Error(ErrorCode::InvalidArgument, ErrorSource::Http,
                    fmt::format("cannot POST to '{}': {}", url, curl_easy_strerror(code)));
      }
      // Refused, reset, timed out, or the answer broke off: the provider may or may not
      // have done the work, which is exactly what the key makes safe to retry.
      result.http_status = 0;
      result.body.clear();
      result.error = fmt::format("{} (curl {})", curl_easy_strerror(code), static_cast<int>(code));
    } else {
      long status = 0;
      curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
      result.http_status = status;
      result.body = std::move(body);
      if (status >= 200 && status < 300) {
        result.status = CallStatus::Success;
        result.error.clear();
        return result;
      }
      if (!retryable_status(status)) {
        result.status = CallStatus::Permanent;
        result.error = fmt::format("HTTP {}", status);
        return result;
      }
      result.error = fmt::format("HTTP {}", status);
      curl_off_t seconds = -1;  // libcurl parses both forms of Retry-After (seconds, date)
      if (curl_easy_getinfo(curl, CURLINFO_RETRY_AFTER, &seconds) == CURLE_OK && seconds > 0) {
        retry_after = std::min(cfg.max_retry_after,
                               std::chrono::milliseconds(static_cast<std::int64_t>(seconds) * 1000));
      }
    }
    if (attempt == cfg.max_attempts) break;
    const auto wait = std::max(impl_->backoff.delay(static_cast<std::uint32_t>(attempt)), retry_after);
    if (cfg.on_retry) cfg.on_retry(attempt, wait, result.error);
    std::this_thread::sleep_for(wait);
  }
  result.status = CallStatus::RetriesExhausted;
  return result;
}

}  // namespace idem::http
