#include "http/curl_support.hpp"

#include <mutex>
#include <new>
#include <string>

#include <fmt/format.h>

#include "idem/error.hpp"

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

}  // namespace idem::http::detail
