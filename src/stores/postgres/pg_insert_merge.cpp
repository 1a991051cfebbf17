#include "stores/postgres/pg_insert_merge.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace idem::detail::pg {

namespace {

// The few tokens a mergeable INSERT is made of. Anything else (a string literal, a
// comment, an operator, a number) ends the parse: the statement is then not merged,
// which is always correct, only slower.
struct Token {
  enum class Kind { Word, QuotedName, Param, Punct, Cast, End, Other } kind = Kind::End;
  std::size_t begin = 0;
  std::size_t end = 0;
  std::string word;  // Word: lower-cased
  int param = 0;     // Param: its number
  char punct = 0;
};

bool word_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}
bool word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '$';
}

class Lexer {
 public:
  explicit Lexer(std::string_view sql) : sql_(sql) {}

  Token next() {
    while (at_ < sql_.size() && std::isspace(static_cast<unsigned char>(sql_[at_])) != 0) ++at_;
    Token t;
    t.begin = at_;
    if (at_ >= sql_.size()) {
      t.end = at_;
      return t;
    }
    const char c = sql_[at_];
    if (word_start(c)) {
      t.kind = Token::Kind::Word;
      while (at_ < sql_.size() && word_char(sql_[at_])) {
        t.word += static_cast<char>(std::tolower(static_cast<unsigned char>(sql_[at_])));
        ++at_;
      }
    } else if (c == '"') {
      const std::size_t close = sql_.find('"', at_ + 1);
      // An empty name or one with a doubled quote inside: not worth handling.
      if (close == std::string_view::npos || close == at_ + 1 ||
          (close + 1 < sql_.size() && sql_[close + 1] == '"')) {
        t.kind = Token::Kind::Other;
        at_ = sql_.size();
      } else {
        t.kind = Token::Kind::QuotedName;
        at_ = close + 1;
      }
    } else if (c == '$') {
      std::size_t i = at_ + 1;
      int n = 0;
      while (i < sql_.size() && std::isdigit(static_cast<unsigned char>(sql_[i])) != 0 &&
             n <= 65535) {
        n = n * 10 + (sql_[i] - '0');
        ++i;
      }
      t.kind = i > at_ + 1 && n >= 1 && n <= 65535 ? Token::Kind::Param : Token::Kind::Other;
      t.param = n;
      at_ = i;
    } else if (c == ':' && at_ + 1 < sql_.size() && sql_[at_ + 1] == ':') {
      t.kind = Token::Kind::Cast;
      at_ += 2;
    } else if (c == '(' || c == ')' || c == ',' || c == '.' || c == ';' || c == '[' || c == ']') {
      t.kind = Token::Kind::Punct;
      t.punct = c;
      ++at_;
    } else {
      t.kind = Token::Kind::Other;
      at_ = sql_.size();
    }
    t.end = at_;
    return t;
  }

 private:
  std::string_view sql_;
  std::size_t at_ = 0;
};

class Parser {
 public:
  explicit Parser(std::string_view sql) : sql_(sql), lexer_(sql) { advance(); }

  std::optional<InsertShape> parse() {
    InsertShape shape;
    if (!keyword("insert") || !keyword("into") || !qualified_name()) return std::nullopt;
    if (tok_.kind == Token::Kind::Word && tok_.word == "as") {
      advance();
      if (!name()) return std::nullopt;
    }
    if (is_punct('(') && !name_list()) return std::nullopt;
    if (!(tok_.kind == Token::Kind::Word && tok_.word == "values")) return std::nullopt;
    shape.head = fmt::format("{} ", sql_.substr(0, tok_.end));
    advance();
    if (!punct('(')) return std::nullopt;
    for (;;) {
      if (tok_.kind != Token::Kind::Param) return std::nullopt;
      InsertShape::Item item;
      item.param = tok_.param;
      advance();
      if (tok_.kind == Token::Kind::Cast) {
        const std::size_t from = tok_.begin;
        advance();
        if (tok_.kind != Token::Kind::Word) return std::nullopt;
        std::size_t to = tok_.end;
        while (tok_.kind == Token::Kind::Word) {  // `double precision`, `timestamp with time zone`
          to = tok_.end;
          advance();
        }
        if (is_punct('[')) {
          advance();
          if (!is_punct(']')) return std::nullopt;
          to = tok_.end;
          advance();
        }
        item.cast = std::string(sql_.substr(from, to - from));
      }
      shape.items.push_back(std::move(item));
      if (is_punct(')')) break;
      if (!punct(',')) return std::nullopt;
    }
    const std::size_t tail_from = tok_.end;
    advance();
    std::size_t tail_to = tail_from;
    if (tok_.kind == Token::Kind::Word && tok_.word == "on") {
      advance();
      if (!keyword("conflict")) return std::nullopt;
      if (is_punct('(')) {
        if (!name_list()) return std::nullopt;
      } else if (tok_.kind == Token::Kind::Word && tok_.word == "on") {
        advance();
        if (!keyword("constraint") || !name()) return std::nullopt;
      }
      if (!keyword("do") || !(tok_.kind == Token::Kind::Word && tok_.word == "nothing")) {
        return std::nullopt;
      }
      tail_to = tok_.end;
      advance();
    }
    if (is_punct(';')) advance();
    if (tok_.kind != Token::Kind::End) return std::nullopt;
    shape.tail = std::string(sql_.substr(tail_from, tail_to - tail_from));

    // $1..$n, each used: then row k's parameters are exactly k*n+1..k*n+n.
    int max_param = 0;
    for (const auto& item : shape.items) max_param = std::max(max_param, item.param);
    std::vector<bool> used(static_cast<std::size_t>(max_param) + 1, false);
    for (const auto& item : shape.items) used[static_cast<std::size_t>(item.param)] = true;
    if (std::count(used.begin() + 1, used.end(), true) != max_param) return std::nullopt;
    shape.params = static_cast<std::size_t>(max_param);
    return shape;
  }

 private:
  void advance() { tok_ = lexer_.next(); }
  [[nodiscard]] bool is_punct(char c) const {
    return tok_.kind == Token::Kind::Punct && tok_.punct == c;
  }
  bool punct(char c) {
    if (!is_punct(c)) return false;
    advance();
    return true;
  }
  bool keyword(std::string_view w) {
    if (tok_.kind != Token::Kind::Word || tok_.word != w) return false;
    advance();
    return true;
  }
  bool name() {
    if (tok_.kind != Token::Kind::Word && tok_.kind != Token::Kind::QuotedName) return false;
    advance();
    return true;
  }
  bool qualified_name() {
    if (!name()) return false;
    while (is_punct('.')) {
      advance();
      if (!name()) return false;
    }
    return true;
  }
  bool name_list() {  // ( name {, name} )
    if (!punct('(')) return false;
    for (;;) {
      if (!name()) return false;
      if (punct(')')) return true;
      if (!punct(',')) return false;
    }
  }

  std::string_view sql_;
  Lexer lexer_;
  Token tok_;
};

}  // namespace

std::optional<InsertShape> parse_mergeable_insert(std::string_view sql) {
  return Parser(sql).parse();
}

std::string merged_insert_sql(const InsertShape& shape, std::size_t rows) {
  std::string sql = shape.head;
  sql.reserve(sql.size() + rows * (shape.items.size() * 10 + 4) + shape.tail.size());
  for (std::size_t k = 0; k < rows; ++k) {
    sql += k == 0 ? "(" : ", (";
    for (std::size_t i = 0; i < shape.items.size(); ++i) {
      const auto& item = shape.items[i];
      if (i != 0) sql += ", ";
      fmt::format_to(std::back_inserter(sql), "${}{}",
                     k * shape.params + static_cast<std::size_t>(item.param), item.cast);
    }
    sql += ')';
  }
  sql += shape.tail;
  return sql;
}

std::vector<std::size_t> merge_chunks(std::size_t rows, std::size_t params_per_row) {
  std::size_t largest = 1;
  const std::size_t per_row = std::max<std::size_t>(params_per_row, 1);
  while (largest * 2 * per_row <= kMaxMergedParams) largest *= 2;
  std::vector<std::size_t> out;
  while (rows > 0) {
    std::size_t chunk = largest;
    while (chunk > rows) chunk /= 2;
    out.push_back(chunk);
    rows -= chunk;
  }
  return out;
}

InsertMerger::Entry* InsertMerger::entry(const Statement& stmt) {
  auto it = entries_.find(&stmt);
  if (it == entries_.end()) {
    auto e = std::make_unique<Entry>();
    e->shape = parse_mergeable_insert(stmt.sql);
    it = entries_.emplace(&stmt, std::move(e)).first;
  }
  Entry* e = it->second.get();
  return e->shape && !e->disabled ? e : nullptr;
}

Statement* InsertMerger::statement(Entry& e, std::size_t rows, std::string_view& text) {
  std::size_t exp = 0;
  while ((std::size_t{1} << exp) < rows) ++exp;
  if (e.statements.size() <= exp) {
    e.statements.resize(exp + 1, nullptr);
    e.texts.resize(exp + 1);
  }
  if (e.texts[exp].empty()) {
    e.texts[exp] = merged_insert_sql(*e.shape, rows);
    e.statements[exp] = conn_.statement(e.texts[exp]);
    if (e.statements[exp] != nullptr) merged_.emplace(e.statements[exp], &e);
  }
  text = e.texts[exp];
  return e.statements[exp];
}

InsertMerger::Entry* InsertMerger::owner_of(const Statement* stmt) const {
  const auto it = merged_.find(stmt);
  return it == merged_.end() ? nullptr : it->second;
}

}  // namespace idem::detail::pg
