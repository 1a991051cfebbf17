// libFuzzer target: the configuration loader on any TOML file body. load_config reads
// the file by path (ConfigSources::file), so each input is written to one temporary
// file of this process first. Its contract: a Config, or a ConfigError listing problems
// that each name a key; nothing else escapes, and describe() never fails.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "idem/config.hpp"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "config_fuzz: %s\n", what);
  std::abort();
}

const std::string& scratch_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string templ =
        std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/idem-config-fuzz-XXXXXX";
    const int fd = mkstemp(templ.data());
    if (fd < 0) broken("cannot create a temporary file");
    close(fd);
    std::atexit([] { std::remove(scratch_path().c_str()); });
    return templ;
  }();
  return path;
}

void write_file(const std::string& path, std::string_view body) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) broken("cannot open the temporary file");
  if (!body.empty() && std::fwrite(body.data(), 1, body.size(), f) != body.size())
    broken("short write");
  if (std::fclose(f) != 0) broken("cannot close the temporary file");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  // librdkafka's plugin.library.paths dlopen()s what it names: loading arbitrary shared
  // objects is not configuration parsing, so such inputs are not explored.
  if (body.find("plugin") != std::string_view::npos) return -1;
  write_file(scratch_path(), body);
  idem::ConfigSources sources;
  sources.file = scratch_path();
  try {
    const idem::Config config = idem::load_config(sources);
    static_cast<void>(config.describe());
    static_cast<void>(config.consumer_config());
    static_cast<void>(config.relay_config());
  } catch (const idem::ConfigError& e) {
    if (e.problems().empty()) broken("a ConfigError without problems");
    for (const auto& p : e.problems()) {
      if (p.message.empty()) broken("a problem without a message");
    }
  }
  return 0;
}
