#pragma once
// The checks a ConsumerConfig must pass before a Consumer is built.
#include <string>

#include "idem/consumer.hpp"

namespace idem::detail {

/// Throws Error(InvalidArgument, Config) "consumer: <message>".
[[noreturn]] void bad_config(const std::string& message);

/// Throws Error(InvalidArgument, Config) naming the first setting that is wrong.
void validate_consumer_config(const ConsumerConfig& c);

}  // namespace idem::detail
