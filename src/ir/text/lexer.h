// Lexer for the .kir text format, and the literal conversions the parser and the printer
// share (so that what the printer writes is exactly what the parser reads back).
//
// Tokens: identifiers (`add`, `f32`, `dense`), `%value` and `@global` references (a
// global may be quoted: `@"odd name"`), integers (`-3`, `0x7e00`), floats (`1.5`,
// `-2e-3`), strings with \" \\ \n \t \xx escapes, punctuation ( ) { } [ ] < > , : = ->
// and a lone `-` (for `-inf`). `//` starts a comment to the end of the line.
//
// Tensor types do not tokenize like the rest (`2x{seq}x?xf32`), so the parser reads
// their body character by character through peekChar/advanceChar.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ir/core/diag.h"
#include "ir/core/elem_type.h"

namespace kiln {

enum class Tok {
  Eof,
  Error, // `value` holds the message
  Ident,
  ValueRef,  // %name; `value` is the name without '%'
  GlobalRef, // @name or @"name"; `value` is the (unescaped) name
  Int,
  Float,
  String, // `value` is the unescaped contents
  LParen,
  RParen,
  LBrace,
  RBrace,
  LBracket,
  RBracket,
  Less,
  Greater,
  Comma,
  Colon,
  Equal,
  Arrow,
  Minus,
};

struct Token {
  Tok kind = Tok::Eof;
  std::string_view text; // the token's source text
  std::string value;     // see Tok
  uint32_t line = 1;
  uint32_t col = 1;
};

class Lexer {
public:
  Lexer(std::string_view src, std::string file) : src_(src), file_(std::move(file)) {}

  Token next();

  // Raw character access (for tensor type bodies); '\0' past the end.
  char peekChar(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  void advanceChar();
  size_t pos() const { return pos_; }
  std::string_view slice(size_t from, size_t to) const { return src_.substr(from, to - from); }
  Loc here() const { return Loc{file_, line_, col_}; }
  Loc locOf(const Token& t) const { return Loc{file_, t.line, t.col}; }
  const std::string& file() const { return file_; }

private:
  void skipTrivia();
  Token lexNumber(Token t, size_t start);
  Token lexString(Token t, size_t start);
  Token lexName(Token t, size_t start, Tok kind);

  std::string_view src_;
  std::string file_;
  size_t pos_ = 0;
  uint32_t line_ = 1;
  uint32_t col_ = 1;
};

// Unescapes the body of a string literal (without quotes); nullopt on a bad escape.
std::optional<std::string> unescapeString(std::string_view body);
// Quotes and escapes a string so that the lexer reads back the same bytes.
std::string quoteString(std::string_view s);
// True when `name` can be written after '%' or '@' without quotes.
bool isBareName(std::string_view name);

// Integer literal text (decimal, optional '-', or 0x hex) to int64; nullopt on overflow.
std::optional<int64_t> parseIntLiteral(std::string_view text);
// Float literal text to a value of element type `t` (F64/F32/F16/BF16), rounded the way
// the parser stores it: f32/f16/bf16 go through float, so printing the shortest float
// text reparses to the same bits. nullopt when out of the type's range.
std::optional<double> parseFloatLiteral(std::string_view text, ElemType t);

} // namespace kiln
