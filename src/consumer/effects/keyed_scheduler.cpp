#include "consumer/effects/keyed_scheduler.hpp"

#include <algorithm>

namespace idem::detail {

void KeyedScheduler::make_runnable(const std::string& key, Lane& lane) {
  lane.state = State::Idle;
  if (!lane.tickets.empty()) runnable_.push_back(key);
}

void KeyedScheduler::erase_if_empty(const std::string& key) {
  const auto it = lanes_.find(key);
  if (it != lanes_.end() && it->second.tickets.empty() && it->second.state == State::Idle)
    lanes_.erase(it);
}

void KeyedScheduler::push(const std::string& key, Ticket ticket) {
  Lane& lane = lanes_[key];
  lane.tickets.push_back(ticket);
  ++size_;
  if (lane.state == State::Idle && lane.tickets.size() == 1) runnable_.push_back(key);
}

std::vector<KeyedScheduler::Ticket> KeyedScheduler::take_ready(TimePoint now) {
  while (!waiting_.empty() && waiting_.begin()->first <= now) {
    const auto [at, key] = *waiting_.begin();
    waiting_.erase(waiting_.begin());
    const auto it = lanes_.find(key);
    // A stale entry: the lane was retried again (a later time) or emptied meanwhile.
    if (it == lanes_.end() || it->second.state != State::Waiting || it->second.resume_at != at)
      continue;
    make_runnable(key, it->second);
  }
  std::vector<Ticket> out;
  while (in_flight_ < max_in_flight_ && !runnable_.empty()) {
    const std::string key = std::move(runnable_.front());
    runnable_.pop_front();
    const auto it = lanes_.find(key);
    if (it == lanes_.end() || it->second.state != State::Idle || it->second.tickets.empty())
      continue;
    it->second.state = State::InFlight;
    ++in_flight_;
    out.push_back(it->second.tickets.front());
  }
  return out;
}

void KeyedScheduler::call_returned(const std::string& key) {
  const auto it = lanes_.find(key);
  if (it == lanes_.end() || it->second.state != State::InFlight) return;
  it->second.state = State::Returned;
  --in_flight_;
}

void KeyedScheduler::finish(const std::string& key) {
  const auto it = lanes_.find(key);
  if (it == lanes_.end() || !started(it->second.state)) return;
  if (it->second.state == State::InFlight) --in_flight_;
  it->second.tickets.pop_front();
  --size_;
  make_runnable(key, it->second);
  erase_if_empty(key);
}

void KeyedScheduler::retry_at(const std::string& key, TimePoint at) {
  const auto it = lanes_.find(key);
  if (it == lanes_.end() || !started(it->second.state)) return;
  if (it->second.state == State::InFlight) --in_flight_;
  it->second.state = State::Waiting;
  it->second.resume_at = at;
  waiting_.emplace(at, key);
}

void KeyedScheduler::remove_queued(const std::function<bool(Ticket)>& drop) {
  std::vector<std::string> emptied;
  for (auto& [key, lane] : lanes_) {
    const bool head_in_flight = started(lane.state);
    const Ticket head = lane.tickets.empty() ? 0 : lane.tickets.front();
    const auto first = lane.tickets.begin() + (head_in_flight ? 1 : 0);
    const auto kept = std::remove_if(first, lane.tickets.end(), drop);
    size_ -= static_cast<std::size_t>(lane.tickets.end() - kept);
    lane.tickets.erase(kept, lane.tickets.end());
    // A waiting head that was removed takes its wait with it: the new head may start.
    if (lane.state == State::Waiting && (lane.tickets.empty() || lane.tickets.front() != head))
      make_runnable(key, lane);
    if (lane.tickets.empty() && lane.state == State::Idle) emptied.push_back(key);
  }
  for (const auto& key : emptied) lanes_.erase(key);
}

std::optional<KeyedScheduler::TimePoint> KeyedScheduler::next_retry() const {
  for (const auto& [at, key] : waiting_) {
    const auto it = lanes_.find(key);
    if (it != lanes_.end() && it->second.state == State::Waiting && it->second.resume_at == at)
      return at;
  }
  return std::nullopt;
}

bool KeyedScheduler::runnable() const noexcept {
  if (in_flight_ >= max_in_flight_) return false;
  return std::any_of(runnable_.begin(), runnable_.end(), [&](const std::string& key) {
    const auto it = lanes_.find(key);
    return it != lanes_.end() && it->second.state == State::Idle && !it->second.tickets.empty();
  });
}

}  // namespace idem::detail
