// idem: the command-line tool.
#include <exception>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "idem/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"idem: exactly-once effects for Kafka consumers"};
  app.set_version_flag("--version", std::string("idem ") + IDEM_VERSION);
  app.require_subcommand(1);

  idem::cli::ExitCode exit_code;
  idem::cli::register_migrate(app, exit_code);
  idem::cli::register_consume(app, exit_code);
  idem::cli::register_demo(app, exit_code);
  idem::cli::register_dev_broker(app, exit_code);
  idem::cli::register_relay(app, exit_code);
  idem::cli::register_orders(app, exit_code);
  idem::cli::register_dlq(app, exit_code);
  idem::cli::register_outbox(app, exit_code);
  idem::cli::register_maintain(app, exit_code);
  idem::cli::register_retention(app, exit_code);
  idem::cli::register_offsets(app, exit_code);
  idem::cli::register_console(app, exit_code);
  idem::cli::register_config(app, exit_code);
  idem::cli::register_provider(app, exit_code);
  idem::cli::register_http_check(app, exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const idem::Error& e) {
    std::cerr << fmt::format("idem: error ({}/{}): {}\n", to_string(e.source()),
                             to_string(e.code()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "idem: error: " << e.what() << "\n";
    return 1;
  }
  return exit_code.value;
}
