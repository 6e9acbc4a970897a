// Tokens of the .kir text format and the literal conversions shared with the printer.
#include "ir/text/lexer.h"

#include <charconv>
#include <cmath>

namespace kiln {

static bool isDigit(char c) { return c >= '0' && c <= '9'; }
static bool isHexDigit(char c) {
  return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
static bool isIdentStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool isNameChar(char c) { return isIdentStart(c) || isDigit(c) || c == '.'; }

void Lexer::advanceChar() {
  if (pos_ >= src_.size()) return;
  if (src_[pos_] == '\n') {
    ++line_;
    col_ = 1;
  } else {
    ++col_;
  }
  ++pos_;
}

void Lexer::skipTrivia() {
  for (;;) {
    char c = peekChar();
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      advanceChar();
    } else if (c == '/' && peekChar(1) == '/') {
      while (pos_ < src_.size() && src_[pos_] != '\n') advanceChar();
    } else {
      return;
    }
  }
}

Token Lexer::next() {
  skipTrivia();
  Token t;
  t.line = line_;
  t.col = col_;
  size_t start = pos_;
  if (pos_ >= src_.size()) {
    t.kind = Tok::Eof;
    return t;
  }
  char c = peekChar();
  auto single = [&](Tok k) {
    advanceChar();
    t.kind = k;
    t.text = slice(start, pos_);
    return t;
  };
  switch (c) {
  case '(': return single(Tok::LParen);
  case ')': return single(Tok::RParen);
  case '{': return single(Tok::LBrace);
  case '}': return single(Tok::RBrace);
  case '[': return single(Tok::LBracket);
  case ']': return single(Tok::RBracket);
  case '<': return single(Tok::Less);
  case '>': return single(Tok::Greater);
  case ',': return single(Tok::Comma);
  case ':': return single(Tok::Colon);
  case '=': return single(Tok::Equal);
  case '"': return lexString(t, start);
  case '%': advanceChar(); return lexName(t, start, Tok::ValueRef);
  case '@': advanceChar(); return lexName(t, start, Tok::GlobalRef);
  default: break;
  }
  if (c == '-') {
    if (peekChar(1) == '>') {
      advanceChar();
      return single(Tok::Arrow);
    }
    if (!isDigit(peekChar(1))) return single(Tok::Minus);
    return lexNumber(t, start);
  }
  if (isDigit(c)) return lexNumber(t, start);
  if (isIdentStart(c)) {
    while (isNameChar(peekChar())) advanceChar();
    t.kind = Tok::Ident;
    t.text = slice(start, pos_);
    return t;
  }
  advanceChar();
  t.kind = Tok::Error;
  t.text = slice(start, pos_);
  unsigned char uc = static_cast<unsigned char>(c);
  if (uc >= 0x20 && uc < 0x7f) {
    t.value = std::string("unexpected character '") + c + "'";
  } else {
    static const char* hex = "0123456789abcdef";
    t.value = std::string("unexpected byte 0x") + hex[uc >> 4] + hex[uc & 15];
  }
  return t;
}

Token Lexer::lexNumber(Token t, size_t start) {
  if (peekChar() == '-') advanceChar();
  t.kind = Tok::Int;
  if (peekChar() == '0' && (peekChar(1) == 'x' || peekChar(1) == 'X') && isHexDigit(peekChar(2))) {
    advanceChar();
    advanceChar();
    while (isHexDigit(peekChar())) advanceChar();
  } else {
    while (isDigit(peekChar())) advanceChar();
    if (peekChar() == '.') {
      t.kind = Tok::Float;
      advanceChar();
      while (isDigit(peekChar())) advanceChar();
    }
    if (peekChar() == 'e' || peekChar() == 'E') {
      t.kind = Tok::Float;
      advanceChar();
      if (peekChar() == '+' || peekChar() == '-') advanceChar();
      if (!isDigit(peekChar())) {
        t.kind = Tok::Error;
        t.text = slice(start, pos_);
        t.value = "expected digits in the exponent of '" + std::string(t.text) + "'";
        return t;
      }
      while (isDigit(peekChar())) advanceChar();
    }
  }
  t.text = slice(start, pos_);
  // `2x3` or `12abc` would silently split into two tokens; a number must end cleanly.
  if (isNameChar(peekChar())) {
    while (isNameChar(peekChar())) advanceChar();
    t.kind = Tok::Error;
    t.text = slice(start, pos_);
    t.value = "invalid number '" + std::string(t.text) + "'";
  }
  return t;
}

Token Lexer::lexString(Token t, size_t start) {
  advanceChar(); // opening quote
  size_t bodyStart = pos_;
  while (pos_ < src_.size() && src_[pos_] != '"' && src_[pos_] != '\n') {
    if (src_[pos_] == '\\' && pos_ + 1 < src_.size() && src_[pos_ + 1] != '\n') advanceChar();
    advanceChar();
  }
  if (peekChar() != '"') {
    t.kind = Tok::Error;
    t.text = slice(start, pos_);
    t.value = "unterminated string";
    return t;
  }
  std::string_view body = slice(bodyStart, pos_);
  advanceChar(); // closing quote
  t.text = slice(start, pos_);
  std::optional<std::string> v = unescapeString(body);
  if (!v) {
    t.kind = Tok::Error;
    t.value = "invalid escape in string (use \\\" \\\\ \\n \\t or \\xx with two hex digits)";
    return t;
  }
  t.kind = Tok::String;
  t.value = std::move(*v);
  return t;
}

Token Lexer::lexName(Token t, size_t start, Tok kind) {
  if (kind == Tok::GlobalRef && peekChar() == '"') {
    Token s = lexString(t, pos_);
    if (s.kind == Tok::Error) return s;
    t.value = std::move(s.value);
  } else {
    size_t nameStart = pos_;
    while (isNameChar(peekChar())) advanceChar();
    t.value = std::string(slice(nameStart, pos_));
  }
  t.text = slice(start, pos_);
  if (t.value.empty()) {
    t.kind = Tok::Error;
    t.value = std::string("expected a name after '") + src_[start] + "'";
    return t;
  }
  t.kind = kind;
  return t;
}

static int hexValue(char c) {
  if (isDigit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

std::optional<std::string> unescapeString(std::string_view body) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\') {
      out += body[i];
      continue;
    }
    if (++i >= body.size()) return std::nullopt;
    switch (body[i]) {
    case '"': out += '"'; break;
    case '\\': out += '\\'; break;
    case 'n': out += '\n'; break;
    case 't': out += '\t'; break;
    default:
      if (i + 1 >= body.size() || !isHexDigit(body[i]) || !isHexDigit(body[i + 1]))
        return std::nullopt;
      out += static_cast<char>(hexValue(body[i]) * 16 + hexValue(body[i + 1]));
      ++i;
    }
  }
  return out;
}

std::string quoteString(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u >= 0x7f) {
      out += '\\';
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool isBareName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!isNameChar(c)) return false;
  return true;
}

std::optional<int64_t> parseIntLiteral(std::string_view text) {
  int64_t v = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  std::from_chars_result r;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X'))
    r = std::from_chars(first + 2, last, v, 16);
  else
    r = std::from_chars(first, last, v, 10);
  if (r.ec != std::errc() || r.ptr != last) return std::nullopt;
  return v;
}

std::optional<double> parseFloatLiteral(std::string_view text, ElemType t) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (t == ElemType::F64) {
    double v = 0;
    auto r = std::from_chars(first, last, v);
    if (r.ec != std::errc() || r.ptr != last) return std::nullopt;
    return v;
  }
  float f = 0;
  auto r = std::from_chars(first, last, f);
  if (r.ec != std::errc() || r.ptr != last) return std::nullopt;
  if (t == ElemType::F16) return halfToFloat(floatToHalf(f));
  if (t == ElemType::BF16) return bf16ToFloat(floatToBf16(f));
  return f;
}

} // namespace kiln
