#pragma once
// Deferred INSERTs of one statement text, queued back to back, sent as multi-row INSERTs
// (fewer statements). Private to the PostgreSQL store; used by
// PostgresTransaction::run_queue().
//
// Only a statement whose rows cannot see each other is merged, so the multi-row form
// behaves as the single rows did: `INSERT INTO name [(columns)] VALUES (items)` with every
// item a placeholder (optionally cast: `$2::uuid`) and at most `ON CONFLICT [target] DO
// NOTHING` after it. Anything else (a subquery, a function call, a literal, RETURNING,
// DO UPDATE, which refuses to touch one row twice in a statement) stays one statement
// per call. What stays different: a FOR EACH STATEMENT trigger fires once per merged
// statement instead of once per row.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "stores/postgres/pg_connection.hpp"

namespace idem::detail::pg {

/// The protocol's limit on the parameters of one statement.
inline constexpr std::size_t kMaxStatementParams = 65535;
/// The parameters of one merged statement, far below that: the DESCRIBE pipelined with a
/// statement's PREPARE answers with 4 bytes per parameter, and libpq (15) drops the
/// connection ("lost synchronization with server") on a ParameterDescription over
/// 30,000 bytes, i.e. past 7,498 parameters. Larger statements would gain little anyway.
inline constexpr std::size_t kMaxMergedParams = 7000;

/// A mergeable INSERT, split where rows are added.
struct InsertShape {
  struct Item {
    int param = 0;     ///< its placeholder's number ($1 = 1)
    std::string cast;  ///< "::uuid", or empty
  };
  std::string head;  ///< "INSERT INTO t (a, b) VALUES "
  std::vector<Item> items;
  std::string tail;        ///< " ON CONFLICT DO NOTHING", or empty
  std::size_t params = 0;  ///< placeholders per row ($1..$params, each used)
};

/// The shape of `sql` if it can be merged (see above), else nothing.
[[nodiscard]] std::optional<InsertShape> parse_mergeable_insert(std::string_view sql);

/// The statement inserting `rows` rows: row k's placeholders are renumbered by k * params.
[[nodiscard]] std::string merged_insert_sql(const InsertShape& shape, std::size_t rows);

/// The rows of each statement a run of `rows` deferred INSERTs is sent as: powers of two,
/// largest first, none with more than kMaxMergedParams parameters. Powers of two bound
/// the distinct texts (prepared once each) to about 16 per statement.
[[nodiscard]] std::vector<std::size_t> merge_chunks(std::size_t rows, std::size_t params_per_row);

/// Per connection: which cached statements merge, and their merged statements.
class InsertMerger {
 public:
  struct Entry {
    std::optional<InsertShape> shape;  ///< nothing: not mergeable
    /// Merged statements by log2(rows) (the connection's cache owns them), and their
    /// texts for when that cache is full (then they run unprepared).
    std::vector<Statement*> statements;
    std::vector<std::string> texts;
    bool disabled = false;  ///< a merged PREPARE failed once: never merged again
  };

  explicit InsertMerger(Connection& conn) : conn_(conn) {}

  /// The entry of `stmt`, or nullptr when it does not merge.
  Entry* entry(const Statement& stmt);
  /// The merged statement of `rows` rows (a power of two > 1). Sets `text` to its SQL
  /// when it must run unprepared (the statement cache is full; nullptr returned).
  Statement* statement(Entry& e, std::size_t rows, std::string_view& text);
  /// True when `stmt` is one of the merged statements.
  [[nodiscard]] Entry* owner_of(const Statement* stmt) const;

 private:
  Connection& conn_;
  std::unordered_map<const Statement*, std::unique_ptr<Entry>> entries_;
  std::unordered_map<const Statement*, Entry*> merged_;
};

}  // namespace idem::detail::pg
