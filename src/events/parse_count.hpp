#pragma once
// How many JSON documents the core's readers (EventReader, JsonDocument) have parsed in
// this process: one per DOM parse, whatever its outcome. Tests use it to show that a
// record is parsed once however many values are read from it.
#include <cstdint>

namespace idem::detail {

[[nodiscard]] std::uint64_t json_documents_parsed() noexcept;

}  // namespace idem::detail
