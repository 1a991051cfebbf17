#pragma once
// A small W3C WebDriver client for the browser tests: it starts Debian's chromedriver,
// opens a headless Chromium session and speaks the WebDriver HTTP protocol (JSON over
// HTTP, through cpp-httplib). No npm, no Selenium. Every wait polls a condition under a
// deadline.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "support/process.hpp"

namespace idem::test {

/// The chromedriver and chromium programs, or nullopt when either is missing.
struct BrowserPrograms {
  std::string chromedriver;
  std::string chromium;
};
[[nodiscard]] std::optional<BrowserPrograms> find_browser();

class WebDriver {
 public:
  /// Starts chromedriver and a headless Chromium session with a `width` x `height` window.
  /// \throws std::runtime_error when either does not come up in time.
  WebDriver(const BrowserPrograms& programs, int width = 1280, int height = 800);
  ~WebDriver();
  WebDriver(const WebDriver&) = delete;
  WebDriver& operator=(const WebDriver&) = delete;

  void navigate(const std::string& url);
  /// Runs `script` (a function body; `arguments` holds `args`) in the page; its return value.
  nlohmann::json execute(const std::string& script,
                         const nlohmann::json& args = nlohmann::json::array());
  /// The id of the first element matching the CSS `selector`, or nullopt.
  [[nodiscard]] std::optional<std::string> find(const std::string& selector);
  void click(const std::string& selector);
  /// Clears the input matching `selector` and types `text` into it.
  void type(const std::string& selector, const std::string& text);
  /// The rendered text of the first element matching `selector` ("" when none).
  [[nodiscard]] std::string text(const std::string& selector);
  /// Polls `script` (which must return a boolean) until true or `timeout`; false then.
  [[nodiscard]] bool wait_until(const std::string& script,
                                std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Saves a PNG screenshot of the window to `path`.
  void screenshot(const std::string& path);

 private:
  nlohmann::json call(const std::string& method, const std::string& path,
                      const nlohmann::json& body = nullptr);
  std::string element(const std::string& selector);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idem::test
