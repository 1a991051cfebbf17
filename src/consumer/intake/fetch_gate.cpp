#include "consumer/intake/fetch_gate.hpp"

#include <algorithm>

namespace idem::detail {

namespace {

std::uint8_t bit(FetchGate::Hold why) {
  return static_cast<std::uint8_t>(why);
}

}  // namespace

void FetchGate::hold(const TopicPartition& tp, Hold why, std::int64_t at) {
  Held& h = held_[tp];
  h.at = h.reasons == 0 ? at : std::min(h.at, at);
  h.reasons |= bit(why);
  // Paused again even when held already: the seek purges anything fetched since.
  fetch_.pause_and_seek({tp, h.at});
}

void FetchGate::release(const TopicPartition& tp, Hold why) {
  const auto it = held_.find(tp);
  if (it == held_.end() || (it->second.reasons & bit(why)) == 0) return;
  it->second.reasons &= static_cast<std::uint8_t>(~bit(why));
  if (it->second.reasons != 0) return;  // another reason still holds it
  const std::int64_t at = progress_.next_expected(tp).value_or(it->second.at);
  held_.erase(it);
  fetch_.seek_and_resume({tp, at});
}

bool FetchGate::held(const TopicPartition& tp) const {
  return held_.contains(tp);
}

bool FetchGate::held(const TopicPartition& tp, Hold why) const {
  const auto it = held_.find(tp);
  return it != held_.end() && (it->second.reasons & bit(why)) != 0;
}

void FetchGate::drop_held(std::vector<KafkaMessage>& batch) const {
  if (held_.empty()) return;
  std::erase_if(batch, [&](const KafkaMessage& m) {
    return held_.contains({rd_kafka_topic_name(m->rkt), m->partition});
  });
}

std::chrono::milliseconds FetchGate::retry_later(const TopicPartition& tp, std::int64_t offset,
                                                 TimePoint now) {
  const auto delay = schedule_.failed(tp, offset, now, backoff_);
  hold(tp, Hold::Retry, offset);
  return delay;
}

void FetchGate::defer_not_due(std::vector<KafkaMessage>& batch, const RetryTopicMap& retry_topics,
                              std::int64_t wall_now_ms, TimePoint now) {
  // A retry-topic record before its not-before time: its partition waits until it is
  // due (the poll loop waits on the schedule, it never sleeps). The partition's records
  // before it are processed now; it and those after it are fetched again.
  std::unordered_map<TopicPartition, std::int64_t, TopicPartitionHash> deferred_from;
  for (const auto& m : batch) {
    const auto not_before = retry_topics.not_before_ms(*m);
    if (!not_before || *not_before <= wall_now_ms) continue;
    TopicPartition tp{rd_kafka_topic_name(m->rkt), m->partition};
    if (deferred_from.contains(tp)) continue;
    // Fetched before a rewind took effect: refused when admitted, and a hold there would
    // pause the partition behind records already held.
    if (const auto expected = progress_.next_expected(tp); expected && m->offset < *expected)
      continue;
    schedule_.defer(tp, now + std::chrono::milliseconds(*not_before - wall_now_ms));
    hold(tp, Hold::Retry, m->offset);
    deferred_from.emplace(std::move(tp), m->offset);
  }
  if (deferred_from.empty()) return;
  std::erase_if(batch, [&](const KafkaMessage& m) {
    const auto it = deferred_from.find({rd_kafka_topic_name(m->rkt), m->partition});
    return it != deferred_from.end() && m->offset >= it->second;
  });
}

void FetchGate::release_due(TimePoint now) {
  if (!schedule_.any_paused()) return;
  for (const TopicPartition& tp : schedule_.take_due(now)) release(tp, Hold::Retry);
}

void FetchGate::forget(std::span<const TopicPartition> partitions) {
  schedule_.forget(partitions);
  for (const auto& tp : partitions) held_.erase(tp);
}

void FetchGate::rewind(std::span<const PartitionOffset> to) {
  for (const PartitionOffset& at : to) {
    forget({&at.tp, 1});
    fetch_.pause_and_seek(at);
    fetch_.seek_and_resume(at);
  }
}

}  // namespace idem::detail
