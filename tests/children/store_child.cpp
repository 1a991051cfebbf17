// A child process for the store race and crash tests. It talks to the test over
// stdin/stdout, one line at a time:
//
//   store_child race URL EVENT_ID GROUP
//       Opens the store, prints "ready", waits for "go", then runs the reference unit
//       of work (mark; if first, add one to test_counter row 1; commit; a transient
//       error redoes the transaction) and prints "won" or "lost".
//   store_child commit-then-wait URL EVENT_ID GROUP
//       Marks the event and writes its effect (a billing_ledger row) in one transaction,
//       commits, prints "committed", then waits for its stdin to close (the test kills it).
//   store_child mark-then-wait URL EVENT_ID GROUP
//       Marks the event and writes its effect, prints "marked" while the transaction is
//       still open, then waits (the test kills it before it can commit).
//
// Exit status: 0 on success, 2 for bad arguments, 1 for any failure (described on stderr).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "idem/amount.hpp"
#include "idem/error.hpp"
#include "idem/store.hpp"
#include "idem/uuid.hpp"
#include "support/process.hpp"

namespace {

using namespace std::chrono_literals;

// No test keeps a child waiting longer than this; a child left behind gives up by itself.
constexpr auto kMaxWait = std::chrono::minutes(5);

void say(std::string_view line) {
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);  // the test waits for this line; never leave it in a buffer
}

/// Blocks until the test sends `expected` (true) or closes stdin / the wait ends (false).
bool wait_for(std::string_view expected) {
  idem::test::LineReader in(STDIN_FILENO);
  while (auto line = in.read_line(kMaxWait)) {
    if (*line == expected) return true;
  }
  return false;
}

bool process_once(idem::Store& store, const idem::Uuid& id, std::string_view group) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (;;) {
    try {
      auto tx = store.begin();
      const bool first = tx->mark_processed(id, group);
      if (first) tx->execute("UPDATE test_counter SET n = n + 1 WHERE id = 1");
      tx->commit();
      return first;
    } catch (const idem::Error& e) {
      if (!e.transient() || std::chrono::steady_clock::now() > deadline) throw;
    }
  }
}

void mark_with_effect(idem::Transaction& tx, const idem::Uuid& id, std::string_view group) {
  if (!tx.mark_processed(id, group)) throw std::runtime_error("event was already processed");
  tx.execute(
      "INSERT INTO billing_ledger (order_id, event_id, amount, provider_payment_id) "
      "VALUES ($1, $2, $3, $4)",
      1, id, idem::Amount::from_hundredths(1000), "pay-" + id.to_string());
}

int run(std::string_view mode, const std::string& url, const idem::Uuid& id,
        const std::string& group) {
  auto store = idem::open_store(url);
  if (mode == "race") {
    say("ready");
    if (!wait_for("go")) return 1;
    say(process_once(*store, id, group) ? "won" : "lost");
    return 0;
  }
  if (mode == "commit-then-wait") {
    auto tx = store->begin();
    mark_with_effect(*tx, id, group);
    tx->commit();
    say("committed");
    (void)wait_for("exit");
    return 0;
  }
  if (mode == "mark-then-wait") {
    auto tx = store->begin();
    mark_with_effect(*tx, id, group);
    say("marked");
    (void)wait_for("exit");
    return 0;  // the transaction rolls back here if the test lets us go
  }
  std::fprintf(stderr, "store_child: unknown mode '%.*s'\n", static_cast<int>(mode.size()),
               mode.data());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s race|commit-then-wait|mark-then-wait URL EVENT_ID GROUP\n",
                 argv[0]);
    return 2;
  }
  const auto id = idem::Uuid::parse(argv[3]);
  if (!id) {
    std::fprintf(stderr, "store_child: not a UUID: %s\n", argv[3]);
    return 2;
  }
  try {
    return run(argv[1], argv[2], *id, argv[4]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_child (%s, pid %d): %s\n", argv[1], static_cast<int>(::getpid()),
                 e.what());
    say(std::string("error: ") + e.what());
    return 1;
  }
}
