#pragma once
// Each subcommand lives in its own file and registers itself on the root app.
// The CLI only parses arguments and wires library objects together.
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace idem::cli {

/// Set by a subcommand's callback; main() returns it.
struct ExitCode {
  int value = 0;
};

void register_migrate(CLI::App& app, ExitCode& exit_code);
void register_consume(CLI::App& app, ExitCode& exit_code);
void register_demo(CLI::App& app, ExitCode& exit_code);
void register_dev_broker(CLI::App& app, ExitCode& exit_code);
void register_relay(CLI::App& app, ExitCode& exit_code);
void register_orders(CLI::App& app, ExitCode& exit_code);
void register_dlq(CLI::App& app, ExitCode& exit_code);
void register_maintain(CLI::App& app, ExitCode& exit_code);

/// Splits repeated `--kafka key=value` flags; throws Error(InvalidArgument, Config)
/// naming a malformed one. (Defined in dlq_command.cpp.)
[[nodiscard]] std::vector<std::pair<std::string, std::string>> parse_kafka_properties(
    const std::vector<std::string>& flags);
void register_config(CLI::App& app, ExitCode& exit_code);
void register_provider(CLI::App& app, ExitCode& exit_code);

}  // namespace idem::cli
