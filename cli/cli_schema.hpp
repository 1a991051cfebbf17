#pragma once
// The configuration of the idem CLI: the core's keys plus the sections of the components
// and commands it runs. Every command loads through this one schema, so each key is known
// to all of them and `idem config check` lists every key of every command.
#include "idem/config.hpp"

namespace idem::cli {

/// `consumer.handler`: the built-in handler `idem consume` runs.
enum class HandlerKind { Count, Billing, Analytics };

/// `idem consume`'s own keys.
struct ConsumeSettings {
  HandlerKind handler = HandlerKind::Count;
};

[[nodiscard]] const ConfigSchema& cli_config_schema();

}  // namespace idem::cli
