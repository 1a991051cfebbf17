#pragma once
/// \file
/// idem's TOML configuration file, parsed once (toml++), every value with its line: the
/// loader reads the keys of its schema from it, and a component the tables it reserved
/// (ConfigSchema::reserve_table: the routes, their tests) from the same parse, through
/// Config::document.
#include <memory>
#include <string>

#include <toml++/toml.h>

namespace idem {

class ConfigDocument {
 public:
  /// Reads and parses `path`. Returns null, with `problem` saying why (naming the line
  /// where there is one), when the file cannot be read, holds a byte outside ASCII, or is
  /// not TOML.
  [[nodiscard]] static std::shared_ptr<const ConfigDocument> read(const std::string& path,
                                                                  std::string& problem);

  /// The path it was read from, as given.
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  /// The whole file; each node's source() holds its line.
  [[nodiscard]] const toml::table& table() const noexcept { return table_; }

  ConfigDocument(std::string file, toml::table table)
      : file_(std::move(file)), table_(std::move(table)) {}

 private:
  std::string file_;
  toml::table table_;
};

}  // namespace idem
