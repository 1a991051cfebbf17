// Shard ownership on SQLite: one relay at a time, by an exclusive flock on
// `<db file>-relay.lock` (released by the kernel when the process dies). The owner owns
// every shard; a standby relay owns none and retries the lock at every rebalance.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "idem/error.hpp"
#include "idem/outbox.hpp"
#include "stores/sqlite/sqlite_outbox.hpp"

namespace idem::detail::sqlite {

namespace {

class SqliteShardClaimer final : public ShardClaimer {
 public:
  explicit SqliteShardClaimer(std::string lock_path) : lock_path_(std::move(lock_path)) {}
  ~SqliteShardClaimer() override {
    if (fd_ >= 0) ::close(fd_);
  }

  bool rebalance() override {
    if (!owned_.empty()) return false;
    if (!lock_path_.empty()) {
      if (fd_ < 0) {
        fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0) {
          throw Error(ErrorCode::Connection, ErrorSource::Sqlite,
                      fmt::format("relay: cannot open {}: {}", lock_path_, std::strerror(errno)));
        }
      }
      if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) return false;  // another relay runs
    }
    for (int s = 0; s < kOutboxShards; ++s) owned_.push_back(s);
    return true;
  }
  // The owner owns everything; a standby has nothing in flight and tries the lock.
  bool balanced() override { return !owned_.empty(); }
  void lost() noexcept override {}  // the file lock does not depend on the connection
  [[nodiscard]] const std::vector<int>& owned() const noexcept override { return owned_; }
  [[nodiscard]] std::int64_t session() const noexcept override { return 0; }

 private:
  std::string lock_path_;  // empty for :memory: (private to one connection anyway)
  int fd_ = -1;
  std::vector<int> owned_;
};

}  // namespace

std::unique_ptr<ShardClaimer> make_shard_claimer(std::string lock_path) {
  return std::make_unique<SqliteShardClaimer>(std::move(lock_path));
}

}  // namespace idem::detail::sqlite
