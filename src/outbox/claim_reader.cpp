#include "outbox/claim_reader.hpp"

#include <utility>

#include "idem/outbox.hpp"

namespace idem::detail {

void to_messages(const Rows& rows, ClaimedBatch& out) {
  if (rows.empty()) return;
  out.session = rows[0].int64(kClaimSession);
  out.ids.reserve(rows.size());
  out.messages.reserve(rows.size());
  for (const auto row : rows) {
    ProducerMessage m;
    m.topic = std::string(row.text(kClaimTopic));
    m.key = std::string(row.text(kClaimKey));
    m.payload = std::string(row.text(kClaimPayload));
    m.event_id = row.uuid(kClaimEventId);  // the row's id, born with the event: never a new one
    for (auto& [name, value] : outbox_headers_from_json(row.text(kClaimHeaders))) {
      if (name == "traceparent") {
        m.traceparent = std::move(value);
      } else {
        m.headers.emplace_back(std::move(name), std::move(value));
      }
    }
    out.ids.push_back(row.int64(kClaimId));
    out.messages.push_back(std::move(m));
  }
}

ClaimReader::ClaimReader(SharedConnection& connection, const OutboxQueries& queries,
                         std::size_t batch_size, bool read_wal_position)
    : connection_(connection),
      queries_(queries),
      batch_size_(batch_size),
      read_wal_position_(read_wal_position),
      thread_([this] { run(); }) {}

ClaimReader::~ClaimReader() {
  {
    std::lock_guard lock(mutex_);
    quit_ = true;
  }
  requested_.notify_all();
  thread_.join();
}

void ClaimReader::run() noexcept {
  std::unique_lock lock(mutex_);
  while (true) {
    requested_.wait(lock, [&] { return quit_ || request_.has_value(); });
    if (quit_) return;
    const Request request = std::move(*request_);
    request_.reset();
    lock.unlock();
    ClaimedBatch result;
    try {
      read(request, result);
    } catch (...) {
      result.error = std::current_exception();
    }
    lock.lock();
    result_ = std::move(result);
    done_.notify_all();
  }
}

void ClaimReader::read(const Request& request, ClaimedBatch& out) {
  const Rows rows = connection_.with([&](Store& store) {
    return queries_.claim(store, request.after_id, request.shard_filter, batch_size_,
                          read_wal_position_ ? &out.wal : nullptr);
  });
  to_messages(rows, out);
}

void ClaimReader::request(std::int64_t after_id, std::string shard_filter) {
  {
    std::lock_guard lock(mutex_);
    request_ = Request{after_id, std::move(shard_filter)};
  }
  outstanding_ = true;
  requested_.notify_one();
}

std::optional<ClaimedBatch> ClaimReader::take() {
  std::lock_guard lock(mutex_);
  if (!result_) return std::nullopt;
  std::optional<ClaimedBatch> r = std::move(result_);
  result_.reset();
  outstanding_ = false;
  return r;
}

void ClaimReader::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  done_.wait_for(lock, timeout, [&] { return result_.has_value(); });
}

bool ClaimReader::discard(std::chrono::steady_clock::time_point until) noexcept {
  if (!outstanding_) return true;
  std::unique_lock lock(mutex_);
  const auto there = [&] { return result_.has_value(); };
  if (until == std::chrono::steady_clock::time_point::max()) {
    done_.wait(lock, there);
  } else if (!done_.wait_until(lock, until, there)) {
    return false;
  }
  result_.reset();
  outstanding_ = false;
  return true;
}

}  // namespace idem::detail
