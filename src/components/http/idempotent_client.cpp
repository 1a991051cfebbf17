#include "idem/http/idempotent_client.hpp"

#include <future>
#include <memory>

#include <fmt/format.h>

#include "http/curl_support.hpp"
#include "idem/error.hpp"
#include "idem/http/async_client.hpp"

namespace idem::http {

void validate_idempotency_key(std::string_view key) {
  if (key.empty()) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Http, "Idempotency-Key is empty");
  }
  if (key.size() > kMaxIdempotencyKeyLength) {
    throw Error(ErrorCode::InvalidArgument, ErrorSource::Http,
                fmt::format("Idempotency-Key is {} characters long; at most {} are allowed",
                            key.size(), kMaxIdempotencyKeyLength));
  }
  detail::validate_header_value("Idempotency-Key", key);
}

// The synchronous client is the asynchronous one waited on: attempts, classification,
// backoff and Retry-After exist once, in AsyncClient's loop.
struct IdempotentClient::Impl {
  explicit Impl(ClientConfig config) : calls(without_breaker(std::move(config))) {}
  // A blocked caller waiting for an endpoint to come back could wait without end inside
  // its transaction; it gets RetriesExhausted and retries on its own terms instead.
  static ClientConfig without_breaker(ClientConfig config) {
    config.breaker.failures_to_open = 0;
    return config;
  }
  AsyncClient calls;
};

IdempotentClient::IdempotentClient(ClientConfig config)
    : impl_(std::make_unique<Impl>(std::move(config))) {}

IdempotentClient::~IdempotentClient() = default;

CallResult IdempotentClient::post_json(
    const std::string& url, std::string_view json_body, std::string_view idempotency_key,
    const std::vector<std::pair<std::string, std::string>>& extra_headers) {
  // Shared with the callback: the loop thread may still be inside set_value() when
  // get() below returns, so the promise must not live on this stack frame.
  auto answer = std::make_shared<std::promise<CallResult>>();
  std::future<CallResult> result = answer->get_future();
  impl_->calls.start(Request{.url = url,
                             .body = std::string(json_body),
                             .idempotency_key = std::string(idempotency_key),
                             .extra_headers = extra_headers},
                     [answer](CallResult r) { answer->set_value(std::move(r)); });
  return result.get();
}

}  // namespace idem::http
