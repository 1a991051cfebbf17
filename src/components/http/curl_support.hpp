#pragma once
// What the HTTP clients share below their public API: libcurl's global initialisation,
// RAII for libcurl's handles, and header checks done before anything is sent.
#include <curl/curl.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace idem::http::detail {

/// Runs curl_global_init once per process (it is not thread-safe itself).
/// \throws Error(Internal, Http) if it failed.
void init_curl_once();

/// Throws Error(InvalidArgument, Http) for a header name that is not an HTTP token
/// (empty, or with a space, colon or control character).
void validate_header_name(std::string_view name);

/// Throws Error(InvalidArgument, Http) for a header value with CR, LF, another control
/// character or DEL: a value must not be able to start a header of its own.
void validate_header_value(std::string_view name, std::string_view value);

struct EasyDeleter {
  void operator()(CURL* handle) const noexcept { curl_easy_cleanup(handle); }
};
using EasyHandle = std::unique_ptr<CURL, EasyDeleter>;

struct MultiDeleter {
  void operator()(CURLM* handle) const noexcept { curl_multi_cleanup(handle); }
};
using MultiHandle = std::unique_ptr<CURLM, MultiDeleter>;

struct UrlDeleter {
  void operator()(CURLU* url) const noexcept { curl_url_cleanup(url); }
};
using Url = std::unique_ptr<CURLU, UrlDeleter>;

struct SlistDeleter {
  void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};
using HeaderList = std::unique_ptr<curl_slist, SlistDeleter>;

/// The URL parsed once by libcurl (the transfer uses this parse too, CURLOPT_CURLU), so a
/// URL libcurl cannot use is an error of AsyncClient::start(), before anything is queued.
/// The path is kept as written (CURLU_PATH_AS_IS): libcurl removes no `.` or `..`
/// segment, so the request goes to the path the caller wrote, never to another one.
/// \throws Error(InvalidArgument, Http) for a URL libcurl rejects or a scheme other than
/// http and https. The message does not quote the URL, which may hold a secret (a token
/// in its query, a webhook's path).
[[nodiscard]] Url parse_http_url(const std::string& url);

/// "scheme://host:port" of a parsed URL (the port is the scheme's default when it has
/// none): the key of the per-host connection limit.
[[nodiscard]] std::string host_of(CURLU* url);

/// CURLOPT_WRITEFUNCTION appending to the std::string at `out`. libcurl calls it inside
/// its own frames: an exception must not unwind through them, so a failed append aborts
/// the transfer instead (CURLE_WRITE_ERROR, transient).
std::size_t append_body(char* data, std::size_t size, std::size_t count, void* out) noexcept;

/// CURLOPT_HEADERFUNCTION collecting "name: value" lines into the
/// std::vector<std::pair<std::string, std::string>> at `out` (a status line starts a new
/// block, so only the last answer's fields stay). noexcept as append_body.
std::size_t append_header_line(char* data, std::size_t size, std::size_t count, void* out) noexcept;

/// Appends "name: value" to `list`. \throws std::bad_alloc.
void append_header(HeaderList& list, std::string_view name, std::string_view value);

}  // namespace idem::http::detail
