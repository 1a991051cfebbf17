#pragma once
// Prepared statements and the per-connection cache of them. Private to the SQLite backend.
#include <sqlite3.h>

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace idem::detail::sqlite {

/// One prepared statement (RAII over sqlite3_stmt) plus how its placeholders map
/// to idem's parameter list.
///
/// idem writes placeholders as `$1`, `$2`, ... on every backend. SQLite treats `$1`
/// as a *named* parameter whose index is its order of first appearance, so `$2 ... $1`
/// would bind the wrong values if bound by position. The statement therefore keeps,
/// for each SQLite parameter index, the idem parameter it takes (from the name "$N").
/// Plain `?` and `?N` are accepted too: their SQLite index is their number.
class Statement {
 public:
  /// Prepares exactly one statement. Throws Error(Query) if SQLite rejects it and
  /// Error(InvalidArgument) for empty SQL, several statements, or named parameters
  /// other than `$N` (`:name`, `@name`, `$name`).
  Statement(sqlite3* db, std::string_view sql, unsigned prepare_flags);
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  [[nodiscard]] sqlite3_stmt* get() const noexcept { return stmt_; }
  /// Entry i is the idem parameter index (0-based) bound to SQLite parameter i+1.
  [[nodiscard]] const std::vector<int>& binding() const noexcept { return binding_; }
  /// How many idem parameters the statement needs: the highest N used, plus 0.
  [[nodiscard]] int arity() const noexcept { return arity_; }

  /// Resets the statement for its next use and drops its bindings (so no bound
  /// pointer outlives the call that bound it). Safe on a statement never stepped.
  void reset() noexcept;

 private:
  sqlite3_stmt* stmt_ = nullptr;
  std::vector<int> binding_;
  int arity_ = 0;
};

/// Resets a statement when leaving scope, so an exception can never leave a
/// statement mid-step (which would keep a read open and block checkpoints).
class StatementUse {
 public:
  explicit StatementUse(Statement& st) noexcept : st_(st) {}
  StatementUse(const StatementUse&) = delete;
  StatementUse& operator=(const StatementUse&) = delete;
  ~StatementUse() { st_.reset(); }
  [[nodiscard]] Statement& operator*() const noexcept { return st_; }

 private:
  Statement& st_;
};

/// A least-recently-used cache of prepared statements, keyed by anything hashable
/// (SQL text for user statements, row count for the batch marker).
///
/// Bounded, because a caller that splices values into SQL text (which it should not do,
/// but can) would otherwise grow the cache, and the memory SQLite holds, without limit.
template <class Key, class Hash = std::hash<Key>, class Eq = std::equal_to<>>
class StatementCache {
 public:
  explicit StatementCache(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  /// The cached statement for `key`, or nullptr. Marks it most recently used.
  template <class K>
  [[nodiscard]] Statement* find(const K& key) {
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    entries_.splice(entries_.begin(), entries_, it->second);
    return it->second->second.get();
  }

  /// Adds a statement (the key must not be cached yet), evicting the least recently
  /// used one when full. Returns the cached statement.
  Statement& insert(Key key, std::unique_ptr<Statement> st) {
    if (entries_.size() >= capacity_) {
      index_.erase(entries_.back().first);
      entries_.pop_back();  // finalizes the statement
    }
    entries_.emplace_front(std::move(key), std::move(st));
    index_.emplace(entries_.front().first, entries_.begin());
    return *entries_.front().second;
  }

  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }
  /// Finalizes every statement (before the connection closes).
  void clear() noexcept {
    index_.clear();
    entries_.clear();
  }

 private:
  using Entry = std::pair<Key, std::unique_ptr<Statement>>;
  std::size_t capacity_;
  std::list<Entry> entries_;  // front = most recently used; nodes never move
  std::unordered_map<Key, typename std::list<Entry>::iterator, Hash, Eq> index_;
};

/// Transparent string hash, so a lookup by string_view does not build a std::string.
struct SqlHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};

using SqlStatementCache = StatementCache<std::string, SqlHash, std::equal_to<>>;
using SizedStatementCache =
    StatementCache<std::size_t, std::hash<std::size_t>, std::equal_to<std::size_t>>;

}  // namespace idem::detail::sqlite
