#include "http/probe_transport.hpp"

#include <cstddef>
#include <new>
#include <string>

#include <fmt/format.h>

#include "http/curl_support.hpp"
#include "idem/error.hpp"

namespace idem::http::detail {

namespace {

// What libcurl's debug callback reports, turned into the two moments of SendHooks.
// libcurl reports the request's header block (CURLINFO_HEADER_OUT) and body bytes
// (CURLINFO_DATA_OUT) as they are written to the socket, and the answer's header lines
// (CURLINFO_HEADER_IN) as they arrive: exact points, where the progress callback would be
// a periodic guess.
struct Moments {
  const SendHooks* hooks = nullptr;
  std::size_t body_size = 0;
  std::size_t body_written = 0;
  bool headers_written = false;
  bool sent_reported = false;
  bool answer_reported = false;
};

int on_debug(CURL* /*handle*/, curl_infotype type, char* /*data*/, std::size_t size,
             void* user) noexcept {
  auto& m = *static_cast<Moments*>(user);
  try {
    if (type == CURLINFO_HEADER_OUT) m.headers_written = true;
    if (type == CURLINFO_DATA_OUT) m.body_written += size;
    if (!m.sent_reported && m.headers_written && m.body_written >= m.body_size) {
      m.sent_reported = true;
      if (m.hooks->request_sent) m.hooks->request_sent();
    }
    if (type == CURLINFO_HEADER_IN && !m.answer_reported) {
      m.answer_reported = true;
      if (m.hooks->answer_started) m.hooks->answer_started();
    }
  } catch (...) {
    // A hook must not unwind through libcurl; the probe's hooks only signal, and a lost
    // signal shows as "no overlap observed" (not applicable), never as a wrong verdict.
  }
  return 0;
}

void set(CURL* handle, CURLoption option, auto value) {
  if (const CURLcode code = curl_easy_setopt(handle, option, value); code != CURLE_OK) {
    throw Error(ErrorCode::Internal, ErrorSource::Http,
                fmt::format("curl_easy_setopt failed: {}", curl_easy_strerror(code)));
  }
}

}  // namespace

ObservedAnswer send_once(const PlannedRequest& request, std::chrono::milliseconds timeout,
                         const SendHooks& hooks) {
  init_curl_once();
  Url url = parse_http_url(request.url);
  EasyHandle easy(curl_easy_init());
  if (!easy) throw std::bad_alloc();
  CURL* h = easy.get();
  HeaderList headers;
  for (const auto& [name, value] : request.headers) append_header(headers, name, value);
  // No "Expect: 100-continue" round trip: it would add a wait the in-flight case cannot
  // tell from the server's own.
  append_header(headers, "Expect", "");

  ObservedAnswer answer{.label = request.label};
  Moments moments{.hooks = &hooks, .body_size = request.body.size()};
  set(h, CURLOPT_CURLU, url.get());
  set(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  if (!request.body.empty() || request.method != "GET") {
    set(h, CURLOPT_POSTFIELDS, request.body.c_str());
    set(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }
  set(h, CURLOPT_HTTPHEADER, headers.get());
  set(h, CURLOPT_NOSIGNAL, 1L);
  set(h, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  set(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  set(h, CURLOPT_WRITEFUNCTION, &append_body);
  set(h, CURLOPT_WRITEDATA, &answer.body);
  set(h, CURLOPT_HEADERFUNCTION, &append_header_line);
  set(h, CURLOPT_HEADERDATA, &answer.headers);
  if (hooks.request_sent || hooks.answer_started) {
    // With a debug function set, VERBOSE output goes to it and nowhere else.
    set(h, CURLOPT_DEBUGFUNCTION, &on_debug);
    set(h, CURLOPT_DEBUGDATA, &moments);
    set(h, CURLOPT_VERBOSE, 1L);
  }

  if (const CURLcode code = curl_easy_perform(h); code != CURLE_OK) {
    answer.error = curl_easy_strerror(code);
    answer.status = 0;
    return answer;
  }
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  answer.status = status;
  return answer;
}

}  // namespace idem::http::detail
