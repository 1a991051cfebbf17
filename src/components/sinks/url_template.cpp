// The checks of a URL template and of the values that go into it (param_values.hpp): a value
// can neither leave the route's path nor make one of its segments `.`, `..` or empty.
#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "idem/http/async_client.hpp"
#include "idem/http/circuit_breaker.hpp"
#include "sinks/param_values.hpp"

namespace idem::sinks::detail {

namespace {

// A URL template as text with this character where each value goes. A URL's literal text
// cannot hold it (sink_config refuses control characters in a URL).
constexpr char kValueMark = '\0';

std::string url_pattern(const Template& url) {
  std::string out;
  for (const Template::Part& part : url.parts) {
    if (part.is_param) {
      out.push_back(kValueMark);
    } else {
      out += part.text;
    }
  }
  return out;
}

// The URL a template makes with every value a plain `x`: what the checks at start parse.
std::string sample_url(const Template& url) {
  std::string sample;
  for (const Template::Part& part : url.parts) sample += part.is_param ? "x" : part.text;
  return sample;
}

// Where the path of `url` starts and ends: after `scheme://` (when the text before `://`
// is a scheme) and the host and port, up to the query or the fragment.
struct PathSpan {
  std::size_t begin = 0;
  std::size_t end = 0;
};

PathSpan path_span(std::string_view url) {
  std::size_t authority = 0;
  const std::size_t scheme_end = url.find("://");
  const std::string_view scheme = url.substr(0, scheme_end);
  if (scheme_end != std::string_view::npos && !scheme.empty() &&
      std::all_of(scheme.begin(), scheme.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '+' || c == '-' || c == '.';
      }))
    authority = scheme_end + 3;
  PathSpan span;
  span.begin = std::min(url.find_first_of("/?#", authority), url.size());
  span.end = std::min(url.find_first_of("?#", span.begin), url.size());
  return span;
}

// The segments of a path ("/a/b/" is "", "a", "b", "": the empty one before the first
// slash is the path's start, not a segment, and is dropped).
std::vector<std::string_view> segments_of(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t at = 0;
  while (at <= path.size()) {
    const std::size_t slash = std::min(path.find('/', at), path.size());
    out.push_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  if (!out.empty() && out.front().empty() && path.starts_with('/')) out.erase(out.begin());
  return out;
}

// A segment as RFC 3986 normalization reads it: `%2E` and `%2e` are a dot.
std::string normalized_dots(std::string_view segment) {
  std::string out;
  for (std::size_t i = 0; i < segment.size(); ++i) {
    if (segment[i] == '%' && i + 2 < segment.size() && segment[i + 1] == '2' &&
        (segment[i + 2] == 'E' || segment[i + 2] == 'e')) {
      out.push_back('.');
      i += 2;
    } else {
      out.push_back(segment[i]);
    }
  }
  return out;
}

}  // namespace

std::optional<std::size_t> param_before_path(const Template& url) {
  const std::string pattern = url_pattern(url);
  const std::size_t first = pattern.find(kValueMark);
  if (first == std::string::npos || first >= path_span(pattern).begin) return std::nullopt;
  // The first value mark is the first parameter's.
  const auto part = std::find_if(url.parts.begin(), url.parts.end(),
                                 [](const Template::Part& p) { return p.is_param; });
  return part->param;
}

std::optional<std::string> control_character(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto u = static_cast<unsigned char>(text[i]);
    if ((u < 0x20 && text[i] != '\t') || u == 0x7f) {
      const std::string_view name = text[i] == '\n'   ? "a line feed (LF)"
                                    : text[i] == '\r' ? "a carriage return (CR)"
                                                      : "a control character";
      return fmt::format("{} at {}", name,
                         i + 1 == text.size()
                             ? std::string("its end")
                             : fmt::format("position {} of {}", i + 1, text.size()));
    }
  }
  return std::nullopt;
}

std::optional<std::string> url_endpoint(const Template& url) {
  if (param_before_path(url)) return std::nullopt;
  try {
    return http::endpoint_of(sample_url(url));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<std::string> url_template_problem(const Template& url,
                                                const std::vector<ParamSpec>& params) {
  if (const auto first = param_before_path(url))
    return fmt::format(
        "{{{}}} is inserted before the URL's path (into its scheme, host or "
        "port): the route's host and port are its own; insert values into the "
        "path or the query",
        params[*first].name);
  const std::string sample = sample_url(url);
  if (control_character(sample)) return std::nullopt;  // read_template said which
  if (auto why = http::url_problem(sample))
    return fmt::format("libcurl cannot send to this URL{}: {}",
                       url.secret ? " (as ${VAR} expanded it, not shown)" : "", *why);
  return std::nullopt;
}

std::optional<ValidationError> url_segment_problem(const Template& url,
                                                   const std::vector<ParamSpec>& params,
                                                   std::string_view rendered) {
  const std::string pattern = url_pattern(url);
  const PathSpan pattern_path = path_span(pattern);
  const PathSpan rendered_path = path_span(rendered);
  const auto pattern_segments = segments_of(
      std::string_view(pattern).substr(pattern_path.begin, pattern_path.end - pattern_path.begin));
  const auto rendered_segments =
      segments_of(rendered.substr(rendered_path.begin, rendered_path.end - rendered_path.begin));
  // The parameters inserted into the path, in order, to name those of a refused segment.
  std::vector<std::size_t> inserted;
  for (const Template::Part& part : url.parts) {
    if (part.is_param) inserted.push_back(part.param);
  }
  std::size_t next_value = static_cast<std::size_t>(
      std::count(pattern.begin(), pattern.begin() + static_cast<std::ptrdiff_t>(pattern_path.begin),
                 kValueMark));
  std::string field;  // the first refused parameter's source
  const auto refuse = [&](std::string_view segment_params, std::string_view what) {
    return ValidationError{
        field, ValidationReason::UrlSegment,
        fmt::format("the value of {} would make a whole segment of the URL's path {}: a server "
                    "resolves or merges such a segment into another path, so it is refused",
                    segment_params, what)};
  };
  if (pattern_segments.size() != rendered_segments.size())
    return refuse("a parameter", "change the number of segments");
  for (std::size_t i = 0; i < pattern_segments.size(); ++i) {
    const auto values = static_cast<std::size_t>(
        std::count(pattern_segments[i].begin(), pattern_segments[i].end(), kValueMark));
    if (values == 0) continue;
    std::string names;
    for (std::size_t v = next_value; v < next_value + values && v < inserted.size(); ++v) {
      const ParamSpec& spec = params[inserted[v]];
      if (names.empty()) field = spec.source.name;
      names += fmt::format("{}${}", names.empty() ? "" : ", ", spec.name);
    }
    next_value += values;
    const std::string segment = normalized_dots(rendered_segments[i]);
    if (segment.empty()) return refuse(names, "empty (`//`)");
    if (segment == "." || segment == "..") return refuse(names, fmt::format("`{}`", segment));
  }
  return std::nullopt;
}

}  // namespace idem::sinks::detail
