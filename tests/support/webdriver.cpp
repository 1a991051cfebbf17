#include "support/webdriver.hpp"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "support/ports.hpp"
#include "support/wait.hpp"

namespace idem::test {

namespace {

constexpr const char* kElementKey = "element-6066-11e4-a52e-4f735466cecf";

std::optional<std::string> on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t colon = std::min(dirs.find(':', start), dirs.size());
    const std::filesystem::path candidate =
        std::filesystem::path(dirs.substr(start, colon - start)) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = colon + 1;
  }
  return std::nullopt;
}

std::string base64_decode(std::string_view in) {
  std::string out;
  int val = 0;
  int bits = -8;
  for (const char c : in) {
    int d = -1;
    if (c >= 'A' && c <= 'Z')
      d = c - 'A';
    else if (c >= 'a' && c <= 'z')
      d = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      d = c - '0' + 52;
    else if (c == '+')
      d = 62;
    else if (c == '/')
      d = 63;
    if (d < 0) continue;
    val = (val << 6) + d;
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

}  // namespace

std::optional<BrowserPrograms> find_browser() {
  auto driver = on_path("chromedriver");
  auto chromium = on_path("chromium");
  if (!driver || !chromium) return std::nullopt;
  return BrowserPrograms{*driver, *chromium};
}

struct WebDriver::Impl {
  ChildProcess driver;
  std::unique_ptr<httplib::Client> client;
  std::string session;
};

WebDriver::WebDriver(const BrowserPrograms& programs, int width, int height) {
  // chromedriver takes the port a moment later (it cannot pick its own and say which).
  const int port = unused_listen_port();
  impl_ = std::make_unique<Impl>(Impl{
      ChildProcess::spawn(programs.chromedriver, {fmt::format("--port={}", port)}), nullptr, {}});
  impl_->client = std::make_unique<httplib::Client>("127.0.0.1", port);
  impl_->client->set_read_timeout(60, 0);
  const bool up = eventually(
      [&] {
        const auto res = impl_->client->Get("/status");
        if (!res || res->status != 200) return false;
        const auto body = nlohmann::json::parse(res->body, nullptr, false);
        return body.is_object() && body["value"].value("ready", false);
      },
      std::chrono::seconds(30), std::chrono::milliseconds(100));
  if (!up) throw std::runtime_error("webdriver: chromedriver did not come up");
  const nlohmann::json capabilities = {
      {"capabilities",
       {{"alwaysMatch",
         {{"browserName", "chrome"},
          {"goog:chromeOptions",
           {{"binary", programs.chromium},
            // Root in a container: Chromium's sandbox needs user namespaces it may lack.
            {"args",
             {"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--disable-extensions", "--lang=en-US",
              fmt::format("--window-size={},{}", width, height)}}}}}}}}};
  impl_->session = call("POST", "/session", capabilities)["sessionId"].get<std::string>();
}

WebDriver::~WebDriver() {
  if (!impl_) return;
  if (!impl_->session.empty()) {
    try {
      call("DELETE", fmt::format("/session/{}", impl_->session));
    } catch (const std::exception&) {
      // The driver is killed next anyway.
    }
  }
  impl_->driver.kill(SIGTERM);
  static_cast<void>(impl_->driver.wait_for(std::chrono::seconds(10)));
}

nlohmann::json WebDriver::call(const std::string& method, const std::string& path,
                               const nlohmann::json& body) {
  const std::string full = path.starts_with("/session/") || path == "/session"
                               ? path
                               : fmt::format("/session/{}{}", impl_->session, path);
  httplib::Result res =
      method == "GET" ? impl_->client->Get(full)
      : method == "DELETE"
          ? impl_->client->Delete(full)
          : impl_->client->Post(full, body.is_null() ? "{}" : body.dump(), "application/json");
  if (!res) throw std::runtime_error(fmt::format("webdriver: {} {}: no answer", method, full));
  auto reply = nlohmann::json::parse(res->body, nullptr, false);
  if (res->status != 200 || reply.is_discarded()) {
    throw std::runtime_error(
        fmt::format("webdriver: {} {}: {} {}", method, full, res->status, res->body));
  }
  return reply["value"];
}

void WebDriver::navigate(const std::string& url) {
  call("POST", "/url", {{"url", url}});
}

nlohmann::json WebDriver::execute(const std::string& script, const nlohmann::json& args) {
  return call("POST", "/execute/sync", {{"script", script}, {"args", args}});
}

std::optional<std::string> WebDriver::find(const std::string& selector) {
  const auto found = call("POST", "/elements", {{"using", "css selector"}, {"value", selector}});
  if (!found.is_array() || found.empty()) return std::nullopt;
  return found[0][kElementKey].get<std::string>();
}

std::string WebDriver::element(const std::string& selector) {
  auto id = find(selector);
  if (!id) throw std::runtime_error(fmt::format("webdriver: no element {}", selector));
  return *id;
}

void WebDriver::click(const std::string& selector) {
  call("POST", fmt::format("/element/{}/click", element(selector)));
}

void WebDriver::type(const std::string& selector, const std::string& text) {
  const std::string id = element(selector);
  call("POST", fmt::format("/element/{}/clear", id));
  call("POST", fmt::format("/element/{}/value", id), {{"text", text}});
}

std::string WebDriver::text(const std::string& selector) {
  const auto id = find(selector);
  if (!id) return {};
  return call("GET", fmt::format("/element/{}/text", *id)).get<std::string>();
}

bool WebDriver::wait_until(const std::string& script, std::chrono::milliseconds timeout) {
  return eventually(
      [&] {
        const auto v = execute(script);
        return v.is_boolean() && v.get<bool>();
      },
      timeout, std::chrono::milliseconds(100));
}

void WebDriver::screenshot(const std::string& path) {
  const std::string png = base64_decode(call("GET", "/screenshot").get<std::string>());
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << png;
}

}  // namespace idem::test
