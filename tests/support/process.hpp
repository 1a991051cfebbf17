#pragma once
// Child processes for the crash and race tests: the library's idem::ChildProcess
// (include/idem/devtools/child_process.hpp), plus where the programs of tests/children/ live.
#include <string>
#include <string_view>

#include "idem/devtools/child_process.hpp"

namespace idem::test {

using idem::ChildProcess;
using idem::expect_line;
using idem::LineReader;
using idem::read_line_starting_with;

}  // namespace idem::test

#ifdef IDEM_TEST_CHILD_DIR
namespace idem::test {
/// Path of the program built from tests/children/<name>.cpp.
inline std::string child_program(std::string_view name) {
  return std::string(IDEM_TEST_CHILD_DIR) + "/" + std::string(name);
}
}  // namespace idem::test
#endif
