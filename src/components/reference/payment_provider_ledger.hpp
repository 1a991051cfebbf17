#pragma once
// The payment provider's keys and charges in the store, written by group commit.
//
// A Store is one blocking connection, and with synchronous=FULL (SQLite) or fsync on
// (PostgreSQL) every COMMIT waits for the disk: a commit per charge caps the provider
// at the disk's flush rate (~1,400 charges/s here with 16 clients). So one store
// thread owns the connection, takes every job that is waiting, runs them all in ONE
// transaction (multi-row statements where a result is needed, deferred ones where it is
// not), commits once and only then completes each job. An answer therefore never leaves
// before its charge is durable, and a crash loses only work nobody was told about.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "idem/clock.hpp"
#include "idem/reference/payment_provider.hpp"
#include "idem/store.hpp"

namespace idem::http::detail {

/// One charge request as the ledger sees it. A stored key's identity is its scope and
/// the key: (client_id, method, path, key).
struct ChargeAttempt {
  std::string key;
  std::string client_id;  ///< digest of the client identity header; empty: anonymous
  std::string method = "POST";
  std::string path = "/payments/charge";
  std::string fingerprint;
  std::int64_t order_id = 0;
  std::string amount;       ///< canonical decimal text
  std::string traceparent;  ///< empty: none sent
  /// claim(): charge in the claim's own transaction (no latency, no hook to run in
  /// between). false: only claim the key; charge() follows.
  bool charge_at_claim = false;
  bool declined = false;  ///< charge nothing, keep no key (only when charging)

  /// The scoped key as one string, for maps and sets: no part holds a newline (a key
  /// holds no control character).
  [[nodiscard]] std::string identity() const;
};

enum class LedgerOutcome {
  Charged,           ///< committed; status and body are the answer
  Declined,          ///< nothing charged, the key released (or never kept)
  Claimed,           ///< the key is ours and in flight; charge() must follow
  InFlight,          ///< the key is claimed by a request still in flight: 409
  DifferentRequest,  ///< the key stands for another request: 422
  Replayed,          ///< the stored first answer (status and body)
  Failed,            ///< the store failed; nothing of this job committed (error)
};

struct LedgerAnswer {
  LedgerOutcome outcome = LedgerOutcome::Failed;
  int status = 0;
  std::string body;
  std::string error;
};

using LedgerCompletion = std::function<void(LedgerAnswer)>;

struct LedgerStats {
  std::int64_t transactions = 0;  ///< write transactions committed
  std::int64_t charges = 0;       ///< charges committed by this process
  std::int64_t largest_batch = 0;
  std::int64_t queued = 0;  ///< jobs waiting for the store thread now
};

class ChargeLedger {
 public:
  /// Applies the provider's migrations and forgets the claims a previous process left in
  /// flight, on the calling thread; then starts the store thread.
  ChargeLedger(std::unique_ptr<Store> store, const Clock& clock,
               std::chrono::milliseconds key_retention);
  ~ChargeLedger();  ///< finishes every queued job, then stops the store thread
  ChargeLedger(const ChargeLedger&) = delete;
  ChargeLedger& operator=(const ChargeLedger&) = delete;

  /// Claims the key (and charges, with charge_at_claim). `done` runs on the store thread.
  void claim(ChargeAttempt attempt, LedgerCompletion done);
  /// Second step of a Claimed attempt: charge, or (declined) release the key. A charge
  /// that fails releases the key too, so a retry can claim it again.
  void charge(ChargeAttempt attempt, LedgerCompletion done);
  /// Releases the claimed key of `attempt`: nothing was charged under it.
  void release(ChargeAttempt attempt);

  /// Runs `fn(Transaction&)` in a read-only transaction on the store thread, after the
  /// writes queued before it committed; returns its result (rethrows its exception).
  template <class Fn>
  auto read(Fn fn) -> std::invoke_result_t<Fn, Transaction&>;
  /// The same, without waiting: `fn(Store&)` runs on the store thread and must not throw.
  void read_async(std::function<void(Store&)> fn);

  [[nodiscard]] LedgerStats stats() const;

  /// The audit's reads, for read(): GET /payments/summary and GET /payments.
  [[nodiscard]] static ProviderSummary read_summary(Transaction& tx);
  [[nodiscard]] static std::vector<Charge> read_charges(Transaction& tx,
                                                        std::optional<std::int64_t> order_id);

 private:
  enum class JobKind { Claim, Charge, Release, Read };
  struct Job {
    JobKind kind = JobKind::Claim;
    ChargeAttempt attempt;
    LedgerCompletion done;
    std::function<void(Store&)> read;
  };

  void enqueue(JobKind kind, ChargeAttempt attempt, LedgerCompletion done,
               std::function<void(Store&)> read);
  void run();
  std::vector<Job> take_batch(std::unique_lock<std::mutex>& lock);
  void commit_writes(std::vector<Job>& jobs);
  std::vector<LedgerAnswer> write(Transaction& tx, std::vector<Job>& jobs);

  std::unique_ptr<Store> store_;
  const Clock& clock_;
  std::chrono::milliseconds key_retention_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  LedgerStats stats_;
  std::thread thread_;  // last: starts after everything above exists
};

template <class Fn>
auto ChargeLedger::read(Fn fn) -> std::invoke_result_t<Fn, Transaction&> {
  using Result = std::invoke_result_t<Fn, Transaction&>;
  auto task = std::make_shared<std::packaged_task<Result(Store&)>>([fn = std::move(fn)](Store& s) {
    auto tx = s.begin_read();
    if constexpr (std::is_void_v<Result>) {
      fn(*tx);
      tx->commit();
    } else {
      Result r = fn(*tx);
      tx->commit();
      return r;
    }
  });
  std::future<Result> result = task->get_future();
  read_async([task](Store& s) { (*task)(s); });
  return result.get();
}

}  // namespace idem::http::detail
