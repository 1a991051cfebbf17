#pragma once
/// \file
/// SHA-256 as lower-case hex, through OpenSSL's libcrypto (the core links it; librdkafka
/// does too). Used where idem names data by digest instead of keeping it: the payload a
/// truncated dead letter stands for, a payment provider client's credential.
#include <string>
#include <string_view>

namespace idem {

/// The SHA-256 digest of `data` as 64 lower-case hex digits; empty if libcrypto fails.
[[nodiscard]] std::string sha256_hex(std::string_view data);

}  // namespace idem
