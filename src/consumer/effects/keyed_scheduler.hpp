#pragma once
// Which effect calls may start now: one FIFO of tickets per ordering key, in arrival
// (offset) order, at most one ticket per key in flight, and at most `max_in_flight`
// tickets in flight over all keys (Confluent Parallel Consumer's "key ordering"). A
// ticket is in flight from take_ready() until its call returns (call_returned()), or
// finish() or retry_at(): the limit counts calls, not results waiting for their apply
// transaction. Its key stays busy until finish() or retry_at(): the next event of a key
// waits for the previous one to be finished, not merely called, so a key's effects are
// applied in offset order too. A key whose head failed waits until its retry time;
// other keys go on. Plain data structure: no clock, no threads (the run() thread owns it).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace idem::detail {

class KeyedScheduler {
 public:
  using Ticket = std::uint64_t;
  using TimePoint = std::chrono::steady_clock::time_point;

  /// \pre max_in_flight >= 1.
  explicit KeyedScheduler(std::size_t max_in_flight) : max_in_flight_(max_in_flight) {}

  /// Appends `ticket` to the queue of `key`.
  void push(const std::string& key, Ticket ticket);

  /// The heads of keys that may start now (not in flight, not waiting for a retry time
  /// after `now`), oldest runnable key first, as many as the in-flight limit allows.
  /// They are in flight when this returns.
  [[nodiscard]] std::vector<Ticket> take_ready(TimePoint now);

  /// The call of the in-flight head of `key` returned: it no longer counts against the
  /// in-flight limit, and its key stays busy until finish() or retry_at().
  void call_returned(const std::string& key);

  /// The head of `key` (in flight or returned) is finished: it leaves the queue; the
  /// next may start.
  void finish(const std::string& key);

  /// The head of `key` (in flight or returned) failed: it stays at the head, no longer
  /// in flight, and may start again at `at` (no other ticket of the key starts before it).
  void retry_at(const std::string& key, TimePoint at);

  /// Removes the tickets for which `drop` is true that are not in flight (e.g. those of
  /// a revoked partition). In-flight tickets stay until finish().
  void remove_queued(const std::function<bool(Ticket)>& drop);

  [[nodiscard]] std::size_t in_flight() const noexcept { return in_flight_; }
  /// Tickets held, in flight or not.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// When the earliest waiting key may start again; nullopt when none waits.
  [[nodiscard]] std::optional<TimePoint> next_retry() const;
  /// True when take_ready() would return something now (ignoring waiting keys).
  [[nodiscard]] bool runnable() const noexcept;

 private:
  enum class State {
    Idle,      // no ticket of the key started
    InFlight,  // its head's call runs (counted in in_flight_)
    Returned,  // its head's call returned; the result waits for its apply transaction
    Waiting,   // its head failed and waits for its retry time
  };
  [[nodiscard]] static bool started(State s) noexcept {
    return s == State::InFlight || s == State::Returned;
  }
  struct Lane {
    std::deque<Ticket> tickets;
    State state = State::Idle;
    TimePoint resume_at{};
  };
  void make_runnable(const std::string& key, Lane& lane);
  void erase_if_empty(const std::string& key);

  std::size_t max_in_flight_;
  std::size_t in_flight_ = 0;
  std::size_t size_ = 0;
  std::unordered_map<std::string, Lane> lanes_;
  // Keys that were idle with tickets when queued here; checked again when taken, so a
  // key that changed since is skipped (no removal from the middle needed).
  std::deque<std::string> runnable_;
  std::multimap<TimePoint, std::string> waiting_;
};

}  // namespace idem::detail
