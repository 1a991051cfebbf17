#pragma once
// Each subcommand lives in its own file and registers itself on the root app.
// The CLI only parses arguments and wires library objects together.
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
void register_outbox(CLI::App& app, ExitCode& exit_code);
void register_maintain(CLI::App& app, ExitCode& exit_code);
void register_retention(CLI::App& app, ExitCode& exit_code);
void register_offsets(CLI::App& app, ExitCode& exit_code);
void register_console(CLI::App& app, ExitCode& exit_code);

void register_config(CLI::App& app, ExitCode& exit_code);
void register_provider(CLI::App& app, ExitCode& exit_code);
void register_http_check(CLI::App& app, ExitCode& exit_code);

}  // namespace idem::cli
