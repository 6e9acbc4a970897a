// Parser for the .kir text format: recursive descent over the tokens of lexer.h.
//
// Grammar (docs/ir.md has the long form):
//   module  := (symbol | weight | device | func)*
//   symbol  := 'symbol' IDENT 'in' '[' INT ',' INT ']' ('divisible_by' INT)? 'data_dependent'?
//   weight  := 'weight' GLOBAL ':' type '=' STRING '[' STRING ']' ('shard' INT 'of' INT 'along'
//   INT)? device  := 'device' (GLOBAL '=')? target          target := IDENT '[' INT ']' func    :=
//   'func' GLOBAL '(' (VALUE ':' type on?),* ')'
//              ('->' (type on? | '(' (type on?),* ')'))? '{' op* '}'
//   op      := (VALUE,+ '=')? IDENT VALUE,* ('{' (IDENT '=' attr),* '}')? (':' type,+)?
//              on? ('loc' '(' STRING (':' INT ':' INT)? ')')?
//   on      := 'on' (target | GLOBAL)     (a GLOBAL names a `device` declaration)
//              (the first operand is on the op name's line; everything else is free-form)
//   type    := 'tensor<' (dim 'x')* ELEMTYPE '>'     dim := INT | '{' symexpr '}' | '?'
//   attr    := scalar | STRING | ELEMTYPE | '[' scalar,* ']' | 'dense' '<' lit '>' ':' type
//   lit     := scalar | '[' lit,* ']'
//   scalar  := INT | FLOAT | 'inf' | '-' 'inf' | 'nan' ('(' INT ')')?
// The parser stops at the first error; recursion is bounded (dense nesting depth) and
// every number is range-checked, so hostile input yields a diagnostic, never a crash.
#include "ir/text/parser.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <unordered_map>

#include "ir/core/builder.h"
#include "ir/text/lexer.h"

namespace kiln {

namespace {

// Deeper nesting than any sensible rank; bounds the recursion on hostile input.
constexpr int kMaxDenseDepth = 64;
// Inline constants are meant to be small; bigger data belongs in a weight file.
constexpr int64_t kMaxDenseBytes = int64_t(1) << 28;

struct Scalar {
  enum Kind { Int, Float, Special } kind = Int;
  std::string_view text;           // Int and Float: the literal
  double special = 0;              // Special: +-inf or the canonical NaN
  std::optional<uint64_t> nanBits; // `nan(0x...)`: exact bits of a non-canonical NaN
  Loc loc;
};

struct Literal {
  std::optional<Scalar> scalar; // a leaf, or else a list of items
  std::vector<Literal> items;
  Loc loc;
};

struct Defined {
  Value* value;
  Loc loc;
};

// Levenshtein distance, for "did you mean" hints on unknown op names.
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

bool isNanBitsFor(uint64_t bits, ElemType t) {
  switch (t) {
  case ElemType::F64: return std::isnan(std::bit_cast<double>(bits));
  case ElemType::F32:
    return bits <= 0xffffffffu && std::isnan(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  case ElemType::F16:
    return bits <= 0xffffu && std::isnan(halfToFloat(static_cast<uint16_t>(bits)));
  case ElemType::BF16:
    return bits <= 0xffffu && std::isnan(bf16ToFloat(static_cast<uint16_t>(bits)));
  default: return false;
  }
}

class Parser {
public:
  Parser(std::string_view text, const std::string& file, Module& m) : lex_(text, file), m_(m) {}

  Status parseModule() {
    advance();
    while (tok_.kind != Tok::Eof) {
      if (isIdent("symbol")) {
        KILN_CHECK(parseSymbol());
      } else if (isIdent("weight")) {
        KILN_CHECK(parseWeight());
      } else if (isIdent("device")) {
        KILN_CHECK(parseDevice());
      } else if (isIdent("func")) {
        KILN_CHECK(parseFunc());
      } else {
        return errorHere("expected 'symbol', 'weight', 'device' or 'func'");
      }
    }
    // Devices, like weights, may be declared after their uses.
    for (PendingDevice& p : pendingDevices_) {
      const DeviceDecl* d = m_.lookupDevice(p.name);
      if (!d) return error(p.loc, "undeclared device @" + p.name);
      p.set(d->target);
    }
    // Weights may be declared after the functions that use them.
    for (const auto& [name, loc] : weightRefs_)
      if (!m_.lookupWeight(name)) return error(loc, "undeclared weight @" + name);
    return ok();
  }

private:
  // ---- tokens ------------------------------------------------------------------------------

  void advance() { tok_ = lex_.next(); }
  bool is(Tok k) const { return tok_.kind == k; }
  bool isIdent(std::string_view s) const { return tok_.kind == Tok::Ident && tok_.text == s; }
  Loc here() const { return lex_.locOf(tok_); }

  std::string describe(const Token& t) const {
    if (t.kind == Tok::Eof) return "end of file";
    return "'" + std::string(t.text) + "'";
  }

  // An error at the current token; a lexer error explains itself instead.
  Diag errorHere(const std::string& expected) const {
    if (tok_.kind == Tok::Error) return error(here(), tok_.value);
    return error(here(), expected + ", found " + describe(tok_));
  }

  Status expect(Tok k, const char* what) {
    if (!is(k)) return errorHere(std::string("expected ") + what);
    advance();
    return ok();
  }

  Result<int64_t> parseInt(const char* what) {
    if (!is(Tok::Int)) return errorHere(std::string("expected ") + what);
    std::optional<int64_t> v = parseIntLiteral(tok_.text);
    if (!v) return error(here(), "integer " + std::string(tok_.text) + " is out of range");
    advance();
    return *v;
  }

  Result<std::string> parseString(const char* what) {
    if (!is(Tok::String)) return errorHere(std::string("expected ") + what);
    std::string s = std::move(tok_.value);
    advance();
    return s;
  }

  // ---- top level ---------------------------------------------------------------------------

  Status parseSymbol() {
    advance();
    Loc loc = here();
    if (!is(Tok::Ident)) return errorHere("expected a symbol name");
    std::string name(tok_.text);
    if (const SymbolInfo* prev = m_.symbols().lookup(name)) {
      Diag d = error(loc, "symbol '" + name + "' is declared twice");
      d.notes.push_back(note(prev->loc, "first declared here"));
      return d;
    }
    advance();
    if (!isIdent("in")) return errorHere("expected 'in'");
    advance();
    KILN_CHECK(expect(Tok::LBracket, "'['"));
    KILN_TRY(int64_t lo, parseInt("the lower bound"));
    KILN_CHECK(expect(Tok::Comma, "','"));
    KILN_TRY(int64_t hi, parseInt("the upper bound"));
    KILN_CHECK(expect(Tok::RBracket, "']'"));
    int64_t divisor = 1;
    if (isIdent("divisible_by")) {
      advance();
      KILN_TRY(divisor, parseInt("a divisor"));
    }
    bool data = isIdent("data_dependent");
    if (data) advance();
    if (lo > hi) return error(loc, "symbol '" + name + "' has an empty range");
    if (divisor < 1) return error(loc, "symbol '" + name + "' needs a positive divisor");
    return m_.symbols().declare(SymbolInfo{name, lo, hi, divisor, loc, data});
  }

  Status parseWeight() {
    advance();
    Loc loc = here();
    if (!is(Tok::GlobalRef)) return errorHere("expected a weight name like @w");
    std::string name = std::move(tok_.value);
    advance();
    KILN_CHECK(expect(Tok::Colon, "':'"));
    KILN_TRY(Type type, parseType());
    KILN_CHECK(expect(Tok::Equal, "'='"));
    KILN_TRY(std::string file, parseString("the weight file name as a string"));
    KILN_CHECK(expect(Tok::LBracket, "'['"));
    KILN_TRY(std::string tensor, parseString("the tensor name as a string"));
    KILN_CHECK(expect(Tok::RBracket, "']'"));
    WeightDecl decl{name, std::move(type), std::move(file), std::move(tensor), loc, std::nullopt};
    if (isIdent("shard")) {
      advance();
      WeightShard s;
      KILN_TRY(s.index, parseInt("the shard's index"));
      if (!isIdent("of")) return errorHere("expected 'of' (shard INDEX of COUNT along AXIS)");
      advance();
      KILN_TRY(s.count, parseInt("the shard count"));
      if (!isIdent("along")) return errorHere("expected 'along' (shard INDEX of COUNT along AXIS)");
      advance();
      KILN_TRY(s.axis, parseInt("the sharded axis"));
      if (s.count < 1 || s.index < 0 || s.index >= s.count || s.axis < 0 ||
          s.axis >= decl.type.rank())
        return error(loc, "weight @" + name + ": shard " + std::to_string(s.index) + " of " +
                              std::to_string(s.count) + " along " + std::to_string(s.axis) +
                              " is not a part of " + decl.type.str());
      decl.shard = s;
    }
    return m_.addWeight(std::move(decl));
  }

  Status parseDevice() {
    advance();
    Loc loc = here();
    std::string name;
    if (is(Tok::GlobalRef)) {
      name = std::move(tok_.value);
      advance();
      KILN_CHECK(expect(Tok::Equal, "'='"));
    }
    KILN_TRY(DeviceTarget t, parseTarget());
    return m_.addDevice(DeviceDecl{std::move(name), std::move(t), loc});
  }

  Result<DeviceTarget> parseTarget() {
    Loc loc = here();
    if (!is(Tok::Ident)) return errorHere("expected a device like ref[0]");
    std::string text(tok_.text);
    advance();
    KILN_CHECK(expect(Tok::LBracket, "'[' and the device ordinal"));
    if (!is(Tok::Int)) return errorHere("expected the device ordinal");
    text += "[" + std::string(tok_.text) + "]";
    advance();
    KILN_CHECK(expect(Tok::RBracket, "']'"));
    return parseDeviceTarget(text, loc);
  }

  // `on ref[1]` or `on @name`; the setter runs now, or once the name is declared.
  Status parseOn(std::function<void(DeviceTarget)> set) {
    if (!isIdent("on")) return ok();
    advance();
    if (is(Tok::GlobalRef)) {
      pendingDevices_.push_back({std::move(tok_.value), here(), std::move(set)});
      advance();
      return ok();
    }
    KILN_TRY(DeviceTarget t, parseTarget());
    set(std::move(t));
    return ok();
  }

  Status parseFunc() {
    advance();
    Loc loc = here();
    if (!is(Tok::GlobalRef)) return errorHere("expected a function name like @main");
    std::string name = std::move(tok_.value);
    if (Func* prev = m_.lookupFunc(name)) {
      Diag d = error(loc, "function @" + name + " is defined twice");
      d.notes.push_back(note(prev->loc(), "first defined here"));
      return d;
    }
    advance();
    Func* f = m_.addFunc(std::make_unique<Func>(name, loc));
    values_.clear();

    KILN_CHECK(expect(Tok::LParen, "'('"));
    while (!is(Tok::RParen)) {
      if (f->numArgs() > 0) KILN_CHECK(expect(Tok::Comma, "',' or ')'"));
      if (!is(Tok::ValueRef)) return errorHere("expected an argument like %x");
      Token argTok = tok_;
      KILN_CHECK(checkNewName(argTok));
      advance();
      KILN_CHECK(expect(Tok::Colon, "':'"));
      KILN_TRY(Type type, parseType());
      size_t index = f->numArgs();
      values_.emplace(argTok.value,
                      Defined{f->addArg(std::move(type), argTok.value), lex_.locOf(argTok)});
      KILN_CHECK(parseOn([f, index](DeviceTarget t) { f->setArgDevice(index, std::move(t)); }));
      if (isIdent("donate")) {
        advance();
        KILN_TRY(int64_t r, parseInt("the index of the result the argument is donated to"));
        if (r < 0) return error(lex_.locOf(argTok), "a donation names a result index >= 0");
        f->setArgDonation(index, static_cast<size_t>(r));
      }
    }
    advance();

    std::vector<Type> results;
    auto resultOn = [&] {
      size_t index = results.size() - 1;
      return parseOn([f, index](DeviceTarget t) { f->setResultDevice(index, std::move(t)); });
    };
    if (is(Tok::Arrow)) {
      advance();
      if (is(Tok::LParen)) {
        advance();
        while (!is(Tok::RParen)) {
          if (!results.empty()) KILN_CHECK(expect(Tok::Comma, "',' or ')'"));
          KILN_TRY(Type t, parseType());
          results.push_back(std::move(t));
          KILN_CHECK(resultOn());
        }
        advance();
      } else {
        KILN_TRY(Type t, parseType());
        results.push_back(std::move(t));
        KILN_CHECK(resultOn());
      }
    }
    f->setResultTypes(std::move(results));

    Loc open = here();
    KILN_CHECK(expect(Tok::LBrace, "'{'"));
    while (!is(Tok::RBrace)) {
      if (is(Tok::Eof)) {
        Diag d = error(here(), "expected '}' to end function @" + name);
        d.notes.push_back(note(open, "the function body starts here"));
        return d;
      }
      KILN_CHECK(parseOp(*f, f->body()));
    }
    advance();
    return ok();
  }

  // ---- ops ---------------------------------------------------------------------------------

  Status checkNewName(const Token& t) {
    auto it = values_.find(t.value);
    if (it == values_.end()) return ok();
    Diag d = error(lex_.locOf(t), "redefinition of %" + t.value);
    d.notes.push_back(note(it->second.loc, "previous definition here"));
    return d;
  }

  // Parses one op into `into`; the names it defines are appended to `defined` when given.
  Status parseOp(Func& f, Block& into, std::vector<std::string>* defined = nullptr) {
    if (++depth_ > kMaxRegionDepth) return errorHere("regions nest too deeply");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    Loc opLoc = here();
    std::vector<Token> names;
    if (is(Tok::ValueRef)) {
      for (;;) {
        if (!is(Tok::ValueRef)) return errorHere("expected a result name like %0");
        KILN_CHECK(checkNewName(tok_));
        for (const Token& n : names)
          if (n.value == tok_.value) return error(here(), "result %" + n.value + " named twice");
        names.push_back(tok_);
        advance();
        if (!is(Tok::Comma)) break;
        advance();
      }
      KILN_CHECK(expect(Tok::Equal, "'=' after the result names"));
    }

    if (!is(Tok::Ident)) return errorHere("expected an op name");
    Loc nameLoc = here();
    std::optional<OpKind> kind = lookupOp(tok_.text);
    if (!kind) return unknownOp();
    const OpInfo& info = opInfo(*kind);
    uint32_t nameLine = tok_.line;
    advance();

    // Operands start on the op's line: `return` followed by `%0 = ...` on the next line
    // is two ops, not a return of %0.
    std::vector<Value*> operands;
    while (is(Tok::ValueRef) && (!operands.empty() || tok_.line == nameLine)) {
      auto it = values_.find(tok_.value);
      if (it == values_.end()) return error(here(), "use of undefined value %" + tok_.value);
      operands.push_back(it->second.value);
      advance();
      if (!is(Tok::Comma)) break;
      advance();
      if (!is(Tok::ValueRef)) return errorHere("expected an operand like %0");
    }

    Attrs attrs;
    if (is(Tok::LBrace) && (numRegionsOf(*kind) == 0 || atAttrDict()))
      KILN_CHECK(parseAttrDict(info, nameLoc, attrs));

    std::vector<Type> types;
    Loc typesLoc = here();
    if (is(Tok::Colon)) {
      if (names.empty())
        return error(typesLoc, "'" + std::string(info.name) +
                                   "' has no result names, so it takes no result types");
      advance();
      for (;;) {
        KILN_TRY(Type t, parseType());
        types.push_back(std::move(t));
        if (!is(Tok::Comma)) break;
        advance();
      }
    } else if (!names.empty()) {
      return errorHere("expected ':' and the result types");
    }

    std::optional<DeviceTarget> device;
    std::optional<size_t> pendingOn;
    if (isIdent("on")) {
      size_t before = pendingDevices_.size();
      KILN_CHECK(parseOn([&device](DeviceTarget t) { device = std::move(t); }));
      if (pendingDevices_.size() > before) pendingOn = before;
      if (isIdent("on")) return error(here(), "an op runs on one device; found a second 'on'");
    }

    if (isIdent("loc")) {
      KILN_TRY(opLoc, parseLoc());
    }

    KILN_CHECK(checkCounts(info, nameLoc, operands.size(), names.size()));
    if (types.size() != names.size())
      return error(typesLoc, "expected " +
                                 plural(static_cast<int64_t>(names.size()), "result type") +
                                 ", found " + std::to_string(types.size()));

    Builder b(&f);
    b.setInsertionBlock(&into);
    b.setLoc(std::move(opLoc));
    Op* op = b.createUnchecked(*kind, operands, std::move(attrs), std::move(types));
    op->setDevice(std::move(device));
    if (pendingOn) pendingDevices_[*pendingOn].set = [op](DeviceTarget t) { op->setDevice(t); };
    for (size_t r = 0; r < numRegionsOf(*kind); ++r) {
      if (r > 0) {
        if (!isIdent("else")) { // an `if` without else: an empty one
          Builder y(&f);
          y.setInsertionBlock(op->addRegion());
          y.setLoc(op->loc());
          y.createUnchecked(OpKind::Yield, {}, {}, {});
          continue;
        }
        advance();
      }
      KILN_CHECK(parseRegion(f, *op));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      values_.emplace(names[i].value, Defined{op->result(i), lex_.locOf(names[i])});
      if (defined) defined->push_back(names[i].value);
    }
    return ok();
  }

  // `{` starts an attribute dictionary when `name =` follows; otherwise a region.
  bool atAttrDict() const {
    Lexer ahead = lex_;
    Token a = ahead.next();
    Token b = ahead.next();
    return a.kind == Tok::Ident && b.kind == Tok::Equal;
  }

  // A region: `(%a: type, ...)` for its block arguments, then `{ ops }`. Names defined
  // inside are forgotten at its end (they are not visible after it). A region that does not
  // end in `yield` gets an empty one (the verifier checks that it fits).
  Status parseRegion(Func& f, Op& op) {
    Block* block = op.addRegion();
    std::vector<std::string> scope;
    auto forget = [&] {
      for (const std::string& n : scope) values_.erase(n);
    };
    if (is(Tok::LParen)) {
      advance();
      while (!is(Tok::RParen)) {
        if (block->numArgs() > 0) KILN_CHECK(expect(Tok::Comma, "',' or ')'"));
        if (!is(Tok::ValueRef)) return errorHere("expected a block argument like %i");
        Token argTok = tok_;
        KILN_CHECK(checkNewName(argTok));
        advance();
        KILN_CHECK(expect(Tok::Colon, "':'"));
        KILN_TRY(Type type, parseType());
        values_.emplace(argTok.value, Defined{block->addArg(std::move(type)), lex_.locOf(argTok)});
        scope.push_back(argTok.value);
      }
      advance();
    }
    Loc open = here();
    if (!is(Tok::LBrace))
      return errorHere("expected '{' to start the region of '" + std::string(op.name()) + "'");
    advance();
    while (!is(Tok::RBrace)) {
      if (is(Tok::Eof)) {
        Diag d =
            error(here(), "expected '}' to end the region of '" + std::string(op.name()) + "'");
        d.notes.push_back(note(open, "the region starts here"));
        return d;
      }
      KILN_CHECK(parseOp(f, *block, &scope));
    }
    advance();
    forget();
    if (!block->terminator()) {
      Builder b(&f);
      b.setInsertionBlock(block);
      b.setLoc(op.loc());
      b.createUnchecked(OpKind::Yield, {}, {}, {});
    }
    return ok();
  }

  Diag unknownOp() const {
    std::string msg = "unknown op '" + std::string(tok_.text) + "'";
    // The nearest names, if any is within two edits.
    std::vector<std::string_view> close;
    size_t best = 3;
    for (const OpInfo& info : allOps()) {
      size_t d = editDistance(tok_.text, info.name);
      if (d < best) close.clear(), best = d;
      if (d == best) close.push_back(info.name);
    }
    if (!close.empty() && close.size() <= 3) {
      msg += "; did you mean ";
      for (size_t i = 0; i < close.size(); ++i)
        msg += (i ? (i + 1 == close.size() ? " or '" : ", '") : "'") + std::string(close[i]) + "'";
      msg += "?";
    }
    return error(here(), msg);
  }

  static Status checkCounts(const OpInfo& info, const Loc& loc, size_t numOperands,
                            size_t numNames) {
    std::string op = "'" + std::string(info.name) + "'";
    auto n = static_cast<int64_t>(numOperands);
    if (n < info.minOperands || (info.maxOperands >= 0 && n > info.maxOperands)) {
      std::string want;
      if (info.minOperands == info.maxOperands)
        want = plural(info.minOperands, "operand");
      else if (info.maxOperands < 0)
        want = "at least " + plural(info.minOperands, "operand");
      else
        want = std::to_string(info.minOperands) + " to " + plural(info.maxOperands, "operand");
      return error(loc, op + " takes " + want + ", found " + std::to_string(n));
    }
    auto r = static_cast<int64_t>(numNames);
    if (info.numResults == -1 && r == 0) return error(loc, op + " needs at least one result name");
    if (info.numResults >= 0 && r != info.numResults)
      return error(loc, op + " has " + plural(info.numResults, "result") + ", but " +
                            std::to_string(r) + (r == 1 ? " name is" : " names are") + " given");
    return ok();
  }

  Result<Loc> parseLoc() {
    advance();
    KILN_CHECK(expect(Tok::LParen, "'('"));
    KILN_TRY(std::string file, parseString("a file or node name"));
    Loc loc = Loc::named(std::move(file));
    if (is(Tok::Colon)) {
      advance();
      Loc at = here();
      KILN_TRY(int64_t line, parseInt("a line number"));
      KILN_CHECK(expect(Tok::Colon, "':'"));
      KILN_TRY(int64_t col, parseInt("a column number"));
      constexpr int64_t kMax = std::numeric_limits<uint32_t>::max();
      if (line < 1 || line > kMax || col < 0 || col > kMax)
        return error(at, "location line/column out of range");
      loc.line = static_cast<uint32_t>(line);
      loc.col = static_cast<uint32_t>(col);
    }
    KILN_CHECK(expect(Tok::RParen, "')'"));
    return loc;
  }

  // ---- attributes --------------------------------------------------------------------------

  Status parseAttrDict(const OpInfo& info, const Loc& opLoc, Attrs& attrs) {
    advance();
    std::string op = "'" + std::string(info.name) + "'";
    while (!is(Tok::RBrace)) {
      if (!attrs.empty()) KILN_CHECK(expect(Tok::Comma, "',' or '}'"));
      if (!is(Tok::Ident)) return errorHere("expected an attribute name");
      Loc nameLoc = here();
      std::string name(tok_.text);
      const AttrSpec* spec = nullptr;
      for (const AttrSpec& s : info.attrs)
        if (s.name == name) spec = &s;
      if (!spec) {
        std::string known;
        for (const AttrSpec& s : info.attrs)
          known += (known.empty() ? "" : ", ") + std::string(s.name);
        return error(nameLoc,
                     op + " has no attribute '" + name + "'" +
                         (known.empty() ? " (it takes none)" : " (it takes " + known + ")"));
      }
      if (attrs.has(name)) return error(nameLoc, "attribute '" + name + "' given twice");
      advance();
      KILN_CHECK(expect(Tok::Equal, "'='"));
      Loc valueLoc = here();
      if (spec->kind == AttrKind::Op) {
        // an op name, bare (`fn = exp`) or quoted
        if (!is(Tok::Ident) && !is(Tok::String))
          return errorHere("attribute '" + name + "' of " + op + " must name an op");
        std::string opName = is(Tok::String) ? tok_.value : std::string(tok_.text);
        std::optional<OpKind> k = lookupOp(opName);
        if (!k)
          return error(valueLoc,
                       "attribute '" + name + "' of " + op + " names no op ('" + opName + "')");
        advance();
        attrs.set(std::move(name), *k);
        continue;
      }
      KILN_TRY(AttrValue v, parseAttrValue());
      // Ints are valid floats, and `[]` is whichever list the op wants.
      if (spec->kind == AttrKind::Float && std::holds_alternative<int64_t>(v))
        v = static_cast<double>(std::get<int64_t>(v));
      if (spec->kind == AttrKind::Floats)
        if (auto* ints = std::get_if<std::vector<int64_t>>(&v))
          v = std::vector<double>(ints->begin(), ints->end());
      if (spec->kind == AttrKind::Strs)
        if (auto* ints = std::get_if<std::vector<int64_t>>(&v); ints && ints->empty())
          v = std::vector<std::string>{};
      if (attrKindOf(v) != spec->kind)
        return error(valueLoc, "attribute '" + name + "' of " + op + " must be " +
                                   std::string(attrKindName(spec->kind)) + ", found " +
                                   std::string(attrKindName(attrKindOf(v))));
      if (info.kind == OpKind::Weight && name == "name")
        weightRefs_.emplace_back(std::get<std::string>(v), valueLoc);
      attrs.set(std::move(name), std::move(v));
    }
    advance();
    for (const AttrSpec& s : info.attrs)
      if (!s.optional && !attrs.has(s.name))
        return error(opLoc, op + " needs attribute '" + std::string(s.name) + "' (" +
                                std::string(attrKindName(s.kind)) + ")");
    return ok();
  }

  bool atScalar() const {
    return is(Tok::Int) || is(Tok::Float) || is(Tok::Minus) || isIdent("inf") || isIdent("nan");
  }

  Result<Scalar> parseScalar() {
    Scalar s;
    s.loc = here();
    if (is(Tok::Int) || is(Tok::Float)) {
      s.kind = is(Tok::Int) ? Scalar::Int : Scalar::Float;
      s.text = tok_.text;
      advance();
      return s;
    }
    s.kind = Scalar::Special;
    if (is(Tok::Minus)) {
      advance();
      if (!isIdent("inf")) return errorHere("expected a number or 'inf' after '-'");
      s.special = -std::numeric_limits<double>::infinity();
      advance();
      return s;
    }
    if (isIdent("inf")) {
      s.special = std::numeric_limits<double>::infinity();
      advance();
      return s;
    }
    if (!isIdent("nan")) return errorHere("expected a number");
    s.special = std::numeric_limits<double>::quiet_NaN();
    advance();
    if (is(Tok::LParen)) {
      advance();
      uint64_t bits = 0;
      std::string_view t = tok_.text;
      if (!is(Tok::Int) || t.size() < 3 || t[0] != '0' || (t[1] != 'x' && t[1] != 'X'))
        return errorHere("expected the NaN's bits in hex, like 0x7fc00001");
      auto r = std::from_chars(t.data() + 2, t.data() + t.size(), bits, 16);
      if (r.ec != std::errc() || r.ptr != t.data() + t.size())
        return error(here(), "NaN bits " + std::string(t) + " are out of range");
      s.nanBits = bits;
      advance();
      KILN_CHECK(expect(Tok::RParen, "')'"));
    }
    return s;
  }

  Result<double> scalarToDouble(const Scalar& s) {
    switch (s.kind) {
    case Scalar::Int: {
      std::optional<int64_t> v = parseIntLiteral(s.text);
      if (!v) return error(s.loc, "integer " + std::string(s.text) + " is out of range");
      return static_cast<double>(*v);
    }
    case Scalar::Float: {
      std::optional<double> v = parseFloatLiteral(s.text, ElemType::F64);
      if (!v) return error(s.loc, "float " + std::string(s.text) + " is out of range for f64");
      return *v;
    }
    case Scalar::Special:
      if (s.nanBits) {
        if (!isNanBitsFor(*s.nanBits, ElemType::F64))
          return error(s.loc, "nan(...) bits do not encode an f64 NaN");
        return std::bit_cast<double>(*s.nanBits);
      }
      return s.special;
    }
    return 0.0;
  }

  // After the '[': `"a", "b"]`.
  Result<AttrValue> parseStringList() {
    std::vector<std::string> items;
    while (!is(Tok::RBracket)) {
      if (!items.empty()) KILN_CHECK(expect(Tok::Comma, "',' or ']'"));
      if (!is(Tok::String)) return errorHere("expected a string (a list holds one kind)");
      items.push_back(std::move(tok_.value));
      advance();
    }
    advance();
    return AttrValue(std::move(items));
  }

  Result<AttrValue> parseAttrValue() {
    if (is(Tok::String)) {
      std::string s = std::move(tok_.value);
      advance();
      return AttrValue(std::move(s));
    }
    if (isIdent("dense")) return parseDense();
    if (is(Tok::Ident) && !isIdent("inf") && !isIdent("nan")) {
      std::optional<ElemType> t = parseElemType(tok_.text);
      if (!t) return errorHere("expected an attribute value");
      advance();
      return AttrValue(*t);
    }
    if (is(Tok::LBracket)) {
      advance();
      if (is(Tok::String)) return parseStringList();
      std::vector<Scalar> items;
      bool allInts = true;
      while (!is(Tok::RBracket)) {
        if (!items.empty()) KILN_CHECK(expect(Tok::Comma, "',' or ']'"));
        if (is(Tok::LBracket)) return error(here(), "nested lists are only allowed in dense<...>");
        KILN_TRY(Scalar s, parseScalar());
        allInts = allInts && s.kind == Scalar::Int;
        items.push_back(s);
      }
      advance();
      if (allInts) {
        std::vector<int64_t> ints;
        for (const Scalar& s : items) {
          std::optional<int64_t> v = parseIntLiteral(s.text);
          if (!v) return error(s.loc, "integer " + std::string(s.text) + " is out of range");
          ints.push_back(*v);
        }
        return AttrValue(std::move(ints));
      }
      std::vector<double> floats;
      for (const Scalar& s : items) {
        KILN_TRY(double d, scalarToDouble(s));
        floats.push_back(d);
      }
      return AttrValue(std::move(floats));
    }
    if (!atScalar()) return errorHere("expected an attribute value");
    KILN_TRY(Scalar s, parseScalar());
    if (s.kind == Scalar::Int) {
      std::optional<int64_t> v = parseIntLiteral(s.text);
      if (!v) return error(s.loc, "integer " + std::string(s.text) + " is out of range");
      return AttrValue(*v);
    }
    KILN_TRY(double d, scalarToDouble(s));
    return AttrValue(d);
  }

  Result<Literal> parseLiteral(int depth) {
    Literal lit;
    lit.loc = here();
    if (depth > kMaxDenseDepth) return error(lit.loc, "dense literal is nested too deeply");
    if (!is(Tok::LBracket)) {
      KILN_TRY(Scalar s, parseScalar());
      lit.scalar = s;
      return lit;
    }
    advance();
    while (!is(Tok::RBracket)) {
      if (!lit.items.empty()) KILN_CHECK(expect(Tok::Comma, "',' or ']'"));
      KILN_TRY(Literal item, parseLiteral(depth + 1));
      lit.items.push_back(std::move(item));
    }
    advance();
    return lit;
  }

  Result<AttrValue> parseDense() {
    advance();
    KILN_CHECK(expect(Tok::Less, "'<' after 'dense'"));
    KILN_TRY(Literal lit, parseLiteral(0));
    KILN_CHECK(expect(Tok::Greater, "'>'"));
    KILN_CHECK(expect(Tok::Colon, "':' and the dense value's type"));
    Loc typeLoc = here();
    KILN_TRY(Type type, parseType());
    if (!type.isStatic()) return error(typeLoc, "a dense value needs a static type");
    std::optional<int64_t> n = type.numElements();
    if (!n || *n > kMaxDenseBytes / elemTypeBytes(type.elem()))
      return error(typeLoc, "dense value too large for inline text (limit " +
                                std::to_string(kMaxDenseBytes >> 20) + " MiB; use a weight)");
    HostTensor t(type.elem(), type.staticShape());
    if (lit.scalar) {
      if (*n > 0) {
        KILN_CHECK(storeScalar(t, 0, *lit.scalar));
        size_t bytes = static_cast<size_t>(elemTypeBytes(t.elem()));
        for (int64_t i = 1; i < *n; ++i)
          std::memcpy(t.mutableData() + static_cast<size_t>(i) * bytes, t.data(), bytes);
      }
    } else {
      int64_t index = 0;
      KILN_CHECK(fillDense(t, lit, 0, index));
    }
    return AttrValue(std::move(t));
  }

  Status fillDense(HostTensor& t, const Literal& lit, int64_t depth, int64_t& index) {
    if (depth == t.rank()) {
      if (!lit.scalar) return error(lit.loc, "expected a scalar at this depth of the dense value");
      return storeScalar(t, index++, *lit.scalar);
    }
    if (lit.scalar) return error(lit.loc, "expected a list at this depth of the dense value");
    int64_t want = t.shape()[static_cast<size_t>(depth)];
    if (static_cast<int64_t>(lit.items.size()) != want)
      return error(lit.loc, "expected " + plural(want, "element") + " in dimension " +
                                std::to_string(depth) + ", found " +
                                std::to_string(lit.items.size()));
    for (const Literal& item : lit.items) KILN_CHECK(fillDense(t, item, depth + 1, index));
    return ok();
  }

  Status storeScalar(HostTensor& t, int64_t i, const Scalar& s) {
    ElemType e = t.elem();
    std::string ty(elemTypeName(e));
    if (!isFloat(e)) {
      if (s.kind != Scalar::Int) return error(s.loc, "expected an integer for " + ty);
      std::optional<int64_t> v = parseIntLiteral(s.text);
      int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
      switch (e) {
      case ElemType::I1: lo = 0, hi = 1; break;
      case ElemType::I8: lo = -128, hi = 127; break;
      case ElemType::I16: lo = -32768, hi = 32767; break;
      case ElemType::I32:
        lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
        break;
      case ElemType::U8: lo = 0, hi = 255; break;
      case ElemType::U16: lo = 0, hi = 65535; break;
      case ElemType::U32: lo = 0, hi = 4294967295; break;
      case ElemType::U64: {
        // The printer writes u64 values unsigned; above INT64_MAX they are stored as bits.
        uint64_t u = 0;
        auto [p, ec] = std::from_chars(s.text.data(), s.text.data() + s.text.size(), u);
        if (ec == std::errc() && p == s.text.data() + s.text.size()) {
          t.setI(i, static_cast<int64_t>(u));
          return ok();
        }
        lo = 0;
        break;
      }
      default: break;
      }
      if (!v || *v < lo || *v > hi)
        return error(s.loc, std::string(s.text) + " is out of range for " + ty);
      t.setI(i, *v);
      return ok();
    }
    if (s.kind == Scalar::Special && s.nanBits) {
      if (!isNanBitsFor(*s.nanBits, e))
        return error(s.loc, "nan(...) bits do not encode a " + ty + " NaN");
      uint8_t* p = t.mutableData() + static_cast<size_t>(i) * static_cast<size_t>(elemTypeBytes(e));
      if (e == ElemType::F64) {
        std::memcpy(p, &*s.nanBits, 8);
      } else if (e == ElemType::F32) {
        auto b = static_cast<uint32_t>(*s.nanBits);
        std::memcpy(p, &b, 4);
      } else {
        auto b = static_cast<uint16_t>(*s.nanBits);
        std::memcpy(p, &b, 2);
      }
      return ok();
    }
    double v = s.special;
    if (s.kind == Scalar::Int) {
      std::optional<int64_t> iv = parseIntLiteral(s.text);
      if (!iv) return error(s.loc, "integer " + std::string(s.text) + " is out of range");
      v = static_cast<double>(*iv);
    } else if (s.kind == Scalar::Float) {
      std::optional<double> fv = parseFloatLiteral(s.text, e);
      if (!fv) return error(s.loc, std::string(s.text) + " is out of range for " + ty);
      v = *fv;
    }
    t.setF(i, v);
    return ok();
  }

  // ---- types -------------------------------------------------------------------------------

  // The current token is `tensor`; its body is read character by character because
  // `2x{seq}xf32` does not split into ordinary tokens.
  Result<Type> parseType() {
    if (isIdent("index")) {
      advance();
      return Type::index();
    }
    if (is(Tok::Ident))
      if (std::optional<ElemType> elem = parseElemType(tok_.text)) {
        advance();
        return Type::scalar(*elem);
      }
    TypeKind kind = TypeKind::Tensor;
    if (isIdent("buffer")) kind = TypeKind::Buffer;
    if (isIdent("vector")) kind = TypeKind::Vector;
    if (!isIdent("tensor") && kind == TypeKind::Tensor)
      return errorHere("expected a type like tensor<4xf32>");
    std::string kindName(tok_.text);
    if (lex_.peekChar() != '<') return error(lex_.here(), "expected '<' after '" + kindName + "'");
    lex_.advanceChar();
    Shape shape;
    for (;;) {
      Loc at = lex_.here();
      char c = lex_.peekChar();
      if (c >= '0' && c <= '9') {
        size_t start = lex_.pos();
        while (lex_.peekChar() >= '0' && lex_.peekChar() <= '9') lex_.advanceChar();
        std::optional<int64_t> v = parseIntLiteral(lex_.slice(start, lex_.pos()));
        if (!v)
          return error(at, "dimension " + std::string(lex_.slice(start, lex_.pos())) +
                               " is out of range");
        shape.emplace_back(*v);
      } else if (c == '{') {
        lex_.advanceChar();
        Loc exprLoc = lex_.here();
        size_t start = lex_.pos();
        while (lex_.peekChar() != '}' && lex_.peekChar() != '\n' && lex_.peekChar() != '\0')
          lex_.advanceChar();
        if (lex_.peekChar() != '}') return error(at, "expected '}' to close the dimension");
        std::string_view text = lex_.slice(start, lex_.pos());
        lex_.advanceChar();
        KILN_TRY(SymExpr e, parseSymExpr(text, exprLoc));
        std::set<std::string> syms;
        e.collectSymbols(syms);
        for (const std::string& s : syms)
          if (!m_.symbols().lookup(s))
            return error(exprLoc, "undeclared symbol '" + s + "' (declare it with `symbol " + s +
                                      " in [lo, hi]`)");
        shape.emplace_back(std::move(e));
      } else if (c == '?') {
        lex_.advanceChar();
        shape.push_back(Dim::unknown());
      } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        size_t start = lex_.pos();
        while (std::isalnum(static_cast<unsigned char>(lex_.peekChar()))) lex_.advanceChar();
        std::string_view name = lex_.slice(start, lex_.pos());
        std::optional<ElemType> elem = parseElemType(name);
        if (!elem) return error(at, "unknown element type '" + std::string(name) + "'");
        MemSpace space = MemSpace::Global;
        if (kind == TypeKind::Buffer && lex_.peekChar() == ',') {
          lex_.advanceChar();
          while (lex_.peekChar() == ' ') lex_.advanceChar();
          Loc spaceAt = lex_.here();
          size_t s0 = lex_.pos();
          while (std::isalpha(static_cast<unsigned char>(lex_.peekChar()))) lex_.advanceChar();
          std::string_view sp = lex_.slice(s0, lex_.pos());
          if (sp == "shared")
            space = MemSpace::Shared;
          else if (sp == "private")
            space = MemSpace::Private;
          else if (sp != "global")
            return error(spaceAt, "expected a memory space (global, shared or private), found '" +
                                      std::string(sp) + "'");
        }
        if (lex_.peekChar() != '>') return error(lex_.here(), "expected '>' to end the type");
        lex_.advanceChar();
        advance();
        if (kind == TypeKind::Buffer) return Type::buffer(*elem, std::move(shape), space);
        if (kind == TypeKind::Vector) {
          if (shape.size() != 1 || !shape[0].isStatic() || shape[0].value() < 1 ||
              shape[0].value() > 64)
            return error(at, "a vector type has one static length in [1, 64], like vector<4xf32>");
          return Type::vector(*elem, shape[0].value());
        }
        return Type(*elem, std::move(shape));
      } else {
        return error(at, "expected a dimension (4, {expr} or ?) or an element type");
      }
      if (lex_.peekChar() != 'x') return error(lex_.here(), "expected 'x' after the dimension");
      lex_.advanceChar();
    }
  }

  Lexer lex_;
  Module& m_;
  Token tok_;
  std::unordered_map<std::string, Defined> values_; // names in the current function
  // How deeply regions nest at the op being parsed (bounded, so no input overflows the stack).
  static constexpr int kMaxRegionDepth = 64;
  int depth_ = 0;
  std::vector<std::pair<std::string, Loc>> weightRefs_;
  struct PendingDevice {
    std::string name;
    Loc loc;
    std::function<void(DeviceTarget)> set;
  };
  std::vector<PendingDevice> pendingDevices_;
};

} // namespace

Result<std::unique_ptr<Module>> parseModule(std::string_view text, const std::string& filename) {
  auto m = std::make_unique<Module>();
  Parser p(text, filename, *m);
  KILN_CHECK(p.parseModule());
  return m;
}

Result<std::unique_ptr<Module>> parseModuleFile(const std::string& path) {
  auto fail = [&](int err) {
    return error(Loc::named(path), std::string("cannot read file: ") + std::strerror(err));
  };
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return fail(errno);
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  int err = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (err) return fail(err);
  KILN_TRY(std::unique_ptr<Module> m, parseModule(text, path));
  std::string dir = std::filesystem::path(path).parent_path().string();
  m->setBaseDir(dir.empty() ? "." : dir);
  return m;
}

} // namespace kiln
