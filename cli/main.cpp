// idem: the command-line tool. It parses arguments and wires library objects; nothing more.
#include <CLI/CLI.hpp>

#include <iostream>

int main(int argc, char** argv) {
  CLI::App app{"idem: exactly-once effects for Kafka consumers"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
