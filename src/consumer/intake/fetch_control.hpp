#pragma once
// What the consumer does to the fetching of one partition: pause it at an offset, resume
// it at an offset, and wake a poll that waits. The seam between the decisions about
// fetching (FetchGate, the effect path) and the librdkafka handle (PollLoop implements
// it); tests put a scripted broker here.
#include "consumer/topic_partition.hpp"

namespace idem::detail {

class FetchControl {
 public:
  FetchControl() = default;
  FetchControl(const FetchControl&) = delete;
  FetchControl& operator=(const FetchControl&) = delete;
  virtual ~FetchControl() = default;

  /// Pauses fetching from `at.tp` and rewinds its fetch position to `at.offset`; records
  /// of it already fetched are purged.
  virtual void pause_and_seek(const PartitionOffset& at) = 0;
  /// Rewinds `at.tp` to `at.offset` (in case a fetch slipped in) and resumes it.
  virtual void seek_and_resume(const PartitionOffset& at) = 0;
  /// Makes a waiting poll return promptly. Thread-safe, never blocks.
  virtual void wake() noexcept = 0;
};

}  // namespace idem::detail
