#include "reference/payment_provider_ledger.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/reference/schema.hpp"
#include "idem/timestamp.hpp"
#include "idem/uuid.hpp"
#include "reference/payment_provider_rules.hpp"

namespace idem::http::detail {

namespace {

// Jobs per transaction at most: bounds a transaction's statements and parameters
// (9 per row at most, far below SQLite's 32,766 and PostgreSQL's 65,535 per statement).
constexpr std::size_t kMaxBatch = 1024;
// A batch's rows go out in statements of these sizes (greedy), so a connection
// prepares a few fixed SQL texts instead of one per batch size.
constexpr std::array<std::size_t, 5> kChunkSizes{256, 64, 16, 4, 1};

template <class Fn>
void for_each_chunk(std::size_t count, Fn&& fn) {
  std::size_t at = 0;
  for (const std::size_t size : kChunkSizes) {
    for (; count - at >= size; at += size) fn(at, size);
  }
}

// "$first, ..." for `count` parameters, or "(...), (...)" rows of `width` parameters.
std::string placeholders(std::size_t first, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) {
    out += fmt::format("{}${}", i == 0 ? "" : ",", first + i);
  }
  return out;
}
std::string value_rows(std::size_t rows, std::size_t width) {
  std::string out;
  for (std::size_t r = 0; r < rows; ++r) {
    out += fmt::format("{}({})", r == 0 ? "" : ",", placeholders(1 + r * width, width));
  }
  return out;
}

std::int64_t to_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

Param optional_text(const std::string& text) {
  return text.empty() ? Param(nullptr) : Param(text);
}

std::string scoped_identity(std::string_view client_id, std::string_view method,
                            std::string_view path, std::string_view key) {
  return fmt::format("{}\n{}\n{}\n{}", client_id, method, path, key);
}

// "$k, ..." (the first of each row's parameters) and "($k,$c,$m,$p), ..." for `count`
// scoped keys whose four parameters start at $first: a DELETE names both, so the plain
// IN list on the key (the primary key's leading column) lets PostgreSQL use the index.
std::string key_placeholders(std::size_t first, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) {
    out += fmt::format("{}${}", i == 0 ? "" : ",", first + i * 4);
  }
  return out;
}
std::string scoped_rows(std::size_t first, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) {
    out += fmt::format("{}({})", i == 0 ? "" : ",", placeholders(first + i * 4, 4));
  }
  return out;
}

struct KeyRow {
  std::string fingerprint;
  std::string state;
  int status = 0;
  std::string body;
  std::int64_t created_at_ms = 0;
};

// The rows of `keys` that exist, of any client, by scoped identity. The lookup names the
// key alone (the primary key's leading column); a key is rarely shared by two scopes.
std::unordered_map<std::string, KeyRow> lookup_keys(Transaction& tx,
                                                    const std::vector<std::string>& keys) {
  std::unordered_map<std::string, KeyRow> found;
  for_each_chunk(keys.size(), [&](std::size_t at, std::size_t n) {
    const std::vector<Param> params(keys.begin() + static_cast<std::ptrdiff_t>(at),
                                    keys.begin() + static_cast<std::ptrdiff_t>(at + n));
    const Rows rows = tx.execute_params(
        fmt::format("SELECT idempotency_key, fingerprint, state, response_status, response_body, "
                    "created_at_ms, client_id, request_method, request_path "
                    "FROM provider_idempotency_key WHERE idempotency_key IN ({})",
                    placeholders(1, n)),
        params);
    for (const RowView row : rows) {
      KeyRow k;
      k.fingerprint = row.text(1);
      k.state = row.text(2);
      if (!row.is_null(3)) k.status = static_cast<int>(row.int64(3));
      if (!row.is_null(4)) k.body = std::string(row.text(4));
      k.created_at_ms = row.int64(5);
      found.emplace(scoped_identity(row.text(6), row.text(7), row.text(8), row.text(0)),
                    std::move(k));
    }
  });
  return found;
}

// DELETE ... WHERE <condition> AND the scoped key is one of `keys`, deferred: nobody
// needs its count. `leading` are the condition's parameters ($1...).
void delete_keys(Transaction& tx, std::string_view condition, const std::vector<Param>& leading,
                 const std::vector<const ChargeAttempt*>& keys) {
  for_each_chunk(keys.size(), [&](std::size_t at, std::size_t n) {
    std::vector<Param> params = leading;
    for (std::size_t i = at; i < at + n; ++i) {
      const ChargeAttempt& a = *keys[i];
      params.insert(params.end(),
                    {Param(a.key), Param(a.client_id), Param(a.method), Param(a.path)});
    }
    const std::size_t first = leading.size() + 1;
    tx.execute_deferred_params(
        fmt::format("DELETE FROM provider_idempotency_key WHERE {} AND idempotency_key IN ({}) "
                    "AND (idempotency_key, client_id, request_method, request_path) IN "
                    "(VALUES {})",
                    condition, key_placeholders(first, n), scoped_rows(first, n)),
        params);
  });
}

struct ChargeRow {
  std::string payment_id;
  const ChargeAttempt* attempt = nullptr;
};

void insert_charges(Transaction& tx, const std::vector<ChargeRow>& charges, std::int64_t now_ms) {
  for_each_chunk(charges.size(), [&](std::size_t at, std::size_t n) {
    std::vector<Param> params;
    params.reserve(n * 7);
    for (std::size_t i = at; i < at + n; ++i) {
      const ChargeAttempt& a = *charges[i].attempt;
      params.insert(params.end(),
                    {Param(charges[i].payment_id), Param(a.order_id), Param(a.amount), Param(a.key),
                     optional_text(a.traceparent), Param(now_ms), Param(a.client_id)});
    }
    tx.execute_deferred_params(
        fmt::format("INSERT INTO provider_charge(payment_id, order_id, amount, idempotency_key, "
                    "traceparent, created_at_ms, client_id) VALUES {}",
                    value_rows(n, 7)),
        params);
  });
}

}  // namespace

std::string ChargeAttempt::identity() const {
  return scoped_identity(client_id, method, path, key);
}

ProviderSummary ChargeLedger::read_summary(Transaction& tx) {
  ProviderSummary r;
  const Rows totals = tx.execute("SELECT count(*), count(DISTINCT order_id) FROM provider_charge");
  r.charges = totals[0].int64(0);
  r.orders = totals[0].int64(1);
  for (const RowView row : tx.execute("SELECT order_id FROM provider_charge GROUP BY order_id "
                                      "HAVING count(*) > 1 ORDER BY order_id")) {
    r.orders_charged_more_than_once.push_back(row.int64(0));
  }
  return r;
}

std::vector<Charge> ChargeLedger::read_charges(Transaction& tx,
                                               std::optional<std::int64_t> order_id) {
  constexpr std::string_view kColumns =
      "SELECT payment_id, order_id, amount, idempotency_key, traceparent, created_at_ms "
      "FROM provider_charge ";
  const Rows rows =
      order_id
          ? tx.execute(std::string(kColumns) + "WHERE order_id = $1 ORDER BY payment_id", *order_id)
          : tx.execute(std::string(kColumns) + "ORDER BY payment_id");
  std::vector<Charge> out;
  out.reserve(rows.size());
  for (const RowView row : rows) {
    out.push_back(
        Charge{.payment_id = std::string(row.text(0)),
               .order_id = row.int64(1),
               .amount = std::string(row.text(2)),
               .idempotency_key = std::string(row.text(3)),
               .traceparent = row.is_null(4) ? std::string() : std::string(row.text(4)),
               .created_at = format_rfc3339(Timestamp(std::chrono::milliseconds(row.int64(5))))});
  }
  return out;
}

ChargeLedger::ChargeLedger(std::unique_ptr<Store> store, const Clock& clock,
                           std::chrono::milliseconds key_retention)
    : store_(std::move(store)), clock_(clock), key_retention_(key_retention) {
  (void)store_->migrate_set(payment_provider_migrations());
  auto tx = store_->begin();
  tx->execute("DELETE FROM provider_idempotency_key WHERE state = 'in_flight'");
  tx->commit();
  thread_ = std::thread([this] { run(); });
}

ChargeLedger::~ChargeLedger() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void ChargeLedger::claim(ChargeAttempt attempt, LedgerCompletion done) {
  enqueue(JobKind::Claim, std::move(attempt), std::move(done), {});
}

void ChargeLedger::charge(ChargeAttempt attempt, LedgerCompletion done) {
  enqueue(JobKind::Charge, std::move(attempt), std::move(done), {});
}

void ChargeLedger::release(ChargeAttempt attempt) {
  enqueue(JobKind::Release, std::move(attempt), {}, {});
}

void ChargeLedger::read_async(std::function<void(Store&)> fn) {
  enqueue(JobKind::Read, {}, {}, std::move(fn));
}

LedgerStats ChargeLedger::stats() const {
  std::lock_guard lock(mutex_);
  LedgerStats s = stats_;
  s.queued = static_cast<std::int64_t>(queue_.size());
  return s;
}

void ChargeLedger::enqueue(JobKind kind, ChargeAttempt attempt, LedgerCompletion done,
                           std::function<void(Store&)> read) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Job{kind, std::move(attempt), std::move(done), std::move(read)});
  }
  wake_.notify_one();
}

void ChargeLedger::run() {
  for (;;) {
    std::vector<Job> batch;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued is done
      batch = take_batch(lock);
    }
    std::vector<Job> writes;
    std::vector<Job> reads;
    for (Job& job : batch) (job.kind == JobKind::Read ? reads : writes).push_back(std::move(job));
    if (!writes.empty()) commit_writes(writes);
    for (Job& job : reads) job.read(*store_);
  }
}

// Everything waiting (up to kMaxBatch writes), except a second job for a key already in
// the batch: it stays queued for the next transaction, so each key sees its jobs one
// after the other (and a multi-row statement never names a key twice). A read queued
// behind a job that stays, stays too, so it still sees every write queued before it.
std::vector<ChargeLedger::Job> ChargeLedger::take_batch(std::unique_lock<std::mutex>&) {
  std::vector<Job> batch;
  std::deque<Job> left;
  std::unordered_set<std::string> keys;
  std::size_t writes = 0;
  for (Job& job : queue_) {
    const bool is_read = job.kind == JobKind::Read;
    const bool take =
        is_read ? left.empty() : writes < kMaxBatch && keys.insert(job.attempt.identity()).second;
    if (take) {
      writes += is_read ? 0 : 1;
      batch.push_back(std::move(job));
    } else {
      left.push_back(std::move(job));
    }
  }
  queue_ = std::move(left);
  return batch;
}

void ChargeLedger::commit_writes(std::vector<Job>& jobs) {
  std::vector<LedgerAnswer> answers;
  try {
    auto tx = store_->begin();
    answers = write(*tx, jobs);
    tx->commit();
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    const bool in_doubt = error != nullptr && error->code() == ErrorCode::InDoubt;
    if (jobs.size() > 1 && !in_doubt) {
      // One job's statement may have failed them all: give each its own transaction,
      // so only the failing one fails.
      for (Job& job : jobs) {
        std::vector<Job> alone;
        alone.push_back(std::move(job));
        commit_writes(alone);
      }
      return;
    }
    for (Job& job : jobs) {
      if (job.kind == JobKind::Charge && !in_doubt) {
        // Nothing was charged: release the key so that a retry can claim it.
        try {
          auto tx = store_->begin();
          delete_keys(*tx, "state = 'in_flight'", {}, {&job.attempt});
          tx->commit();
        } catch (...) {  // the store is gone: a restart forgets in-flight claims anyway
        }
      }
      if (job.done) job.done(LedgerAnswer{LedgerOutcome::Failed, 0, {}, e.what()});
    }
    return;
  }
  {
    std::lock_guard lock(mutex_);
    ++stats_.transactions;
    stats_.largest_batch = std::max(stats_.largest_batch, static_cast<std::int64_t>(jobs.size()));
    stats_.charges += std::count_if(answers.begin(), answers.end(), [](const LedgerAnswer& a) {
      return a.outcome == LedgerOutcome::Charged;
    });
  }
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].done) jobs[i].done(std::move(answers[i]));
  }
}

std::vector<LedgerAnswer> ChargeLedger::write(Transaction& tx, std::vector<Job>& jobs) {
  const std::int64_t now_ms = to_ms(clock_.now());
  std::vector<LedgerAnswer> answers(jobs.size());
  std::vector<ChargeRow> charges;
  std::vector<const ChargeAttempt*> released;

  // Claims: INSERT ... ON CONFLICT DO NOTHING. A claim that charges at once inserts its
  // key as done, with the answer: claim and charge commit together. A declined one
  // inserts nothing and only looks at what the key stands for. Keys that exist are read
  // back; an expired one is forgotten and claimed again. Expiry is checked on those
  // rows only, not with a DELETE over every claimed key first: on PostgreSQL that DELETE
  // (an IN list of up to kMaxBatch keys) was planned as a sequential scan of the whole
  // key table once the list was long, which made each transaction cost O(keys stored):
  // 14 million rows read in 5 s of bench_billing at 100 ms / 1,024 in flight.
  std::vector<std::size_t> claims;
  std::vector<std::size_t> inserting;
  std::vector<std::string> payment_ids(jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].kind != JobKind::Claim) continue;
    claims.push_back(i);
    const ChargeAttempt& a = jobs[i].attempt;
    if (a.charge_at_claim && a.declined) continue;
    if (a.charge_at_claim) {
      payment_ids[i] = "pay_" + new_uuid_v7().to_string();
      answers[i] = {
          LedgerOutcome::Charged, kCharged, charged_body(payment_ids[i], a.order_id, a.amount), {}};
    }
    inserting.push_back(i);
  }
  std::unordered_set<std::string> claimed;
  const auto insert_claims = [&](const std::vector<std::size_t>& rows) {
    for_each_chunk(rows.size(), [&](std::size_t at, std::size_t n) {
      std::vector<Param> params;
      params.reserve(n * 9);
      for (std::size_t j = at; j < at + n; ++j) {
        const std::size_t i = rows[j];
        const ChargeAttempt& a = jobs[i].attempt;
        const bool done = a.charge_at_claim;
        params.insert(
            params.end(),
            {Param(a.key), Param(a.client_id), Param(a.method), Param(a.path), Param(a.fingerprint),
             Param(done ? "done" : "in_flight"), done ? Param(kCharged) : Param(nullptr),
             done ? Param(answers[i].body) : Param(nullptr), Param(now_ms)});
      }
      const Rows rows_claimed = tx.execute_params(
          fmt::format("INSERT INTO provider_idempotency_key(idempotency_key, client_id, "
                      "request_method, request_path, fingerprint, state, response_status, "
                      "response_body, created_at_ms) VALUES {} ON CONFLICT (idempotency_key, "
                      "client_id, request_method, request_path) DO NOTHING RETURNING "
                      "idempotency_key, client_id, request_method, request_path",
                      value_rows(n, 9)),
          params);
      for (const RowView row : rows_claimed)
        claimed.emplace(scoped_identity(row.text(1), row.text(2), row.text(3), row.text(0)));
    });
  };
  insert_claims(inserting);
  std::vector<std::string> existing_keys;
  for (const std::size_t i : claims) {
    if (claimed.count(jobs[i].attempt.identity()) == 0)
      existing_keys.push_back(jobs[i].attempt.key);
  }
  auto existing = lookup_keys(tx, existing_keys);
  const std::int64_t expired_before = now_ms - key_retention_.count();
  std::vector<const ChargeAttempt*> expired_keys;
  std::vector<std::size_t> claiming_again;  // a declined charge only forgets the key
  for (const std::size_t i : claims) {
    const ChargeAttempt& a = jobs[i].attempt;
    const auto it = existing.find(a.identity());
    if (it == existing.end() || it->second.state != "done" ||
        it->second.created_at_ms >= expired_before)
      continue;
    expired_keys.push_back(&a);
    if (!(a.charge_at_claim && a.declined)) claiming_again.push_back(i);
    existing.erase(it);
  }
  if (!expired_keys.empty()) {
    // Read in this transaction, so still there: gone now, and claimed like new keys.
    delete_keys(tx, "state = 'done' AND created_at_ms < $1", {Param(expired_before)}, expired_keys);
    insert_claims(claiming_again);
  }
  for (const std::size_t i : claims) {
    const ChargeAttempt& a = jobs[i].attempt;
    const std::string identity = a.identity();
    if (claimed.count(identity) != 0) {
      if (a.charge_at_claim)
        charges.push_back({payment_ids[i], &a});
      else
        answers[i] = {LedgerOutcome::Claimed, 0, {}, {}};
      continue;
    }
    const auto it = existing.find(identity);
    if (it == existing.end()) {
      // Only a declined charge inserts no key; another provider process that just
      // released the key is the other way here, and a retry sorts it out.
      answers[i] =
          a.declined
              ? LedgerAnswer{LedgerOutcome::Declined, kDeclined, declined_body(a.order_id), {}}
              : LedgerAnswer{LedgerOutcome::InFlight, 409, {}, {}};
    } else if (it->second.fingerprint != a.fingerprint) {
      answers[i] = {LedgerOutcome::DifferentRequest, 422, {}, {}};
    } else if (it->second.state != "done") {
      answers[i] = {LedgerOutcome::InFlight, 409, {}, {}};
    } else {
      answers[i] = {LedgerOutcome::Replayed, it->second.status, it->second.body, {}};
    }
  }

  // Second steps of claimed keys, and releases.
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const ChargeAttempt& a = jobs[i].attempt;
    if (jobs[i].kind == JobKind::Release) {
      released.push_back(&a);
    } else if (jobs[i].kind == JobKind::Charge && a.declined) {
      // A decline charges nothing, so it is not stored: the same key may charge once
      // the customer fixed the cause. That is what replaying a declined event relies on.
      released.push_back(&a);
      answers[i] = {LedgerOutcome::Declined, kDeclined, declined_body(a.order_id), {}};
    } else if (jobs[i].kind == JobKind::Charge) {
      const std::string payment_id = "pay_" + new_uuid_v7().to_string();
      answers[i] = {
          LedgerOutcome::Charged, kCharged, charged_body(payment_id, a.order_id, a.amount), {}};
      tx.execute_deferred(
          "UPDATE provider_idempotency_key SET state = 'done', response_status = $2, "
          "response_body = $3 WHERE idempotency_key = $1 AND client_id = $4 AND "
          "request_method = $5 AND request_path = $6",
          a.key, kCharged, answers[i].body, a.client_id, a.method, a.path);
      charges.push_back({payment_id, &a});
    }
  }
  insert_charges(tx, charges, now_ms);
  delete_keys(tx, "state = 'in_flight'", {}, released);
  return answers;
}

}  // namespace idem::http::detail
