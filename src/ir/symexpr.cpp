// PLACEHOLDER (replaced by the symexpr work): lets the tree link before it lands.
#include "ir/symexpr.h"

namespace kiln {
namespace detail {
struct SymNode {
  int64_t c = 0;
};
} // namespace detail
Status SymbolTable::declare(SymbolInfo info) { syms_[info.name] = info; return ok(); }
const SymbolInfo* SymbolTable::lookup(std::string_view name) const {
  auto it = syms_.find(name);
  return it == syms_.end() ? nullptr : &it->second;
}
SymExpr::SymExpr() : node_(std::make_shared<detail::SymNode>()) {}
SymExpr SymExpr::constant(int64_t v) { auto n = std::make_shared<detail::SymNode>(); n->c = v; return SymExpr(n); }
SymExpr SymExpr::symbol(std::string) { return SymExpr(); }
SymExpr operator+(const SymExpr& a, const SymExpr& b) { return SymExpr::constant(a.node()->c + b.node()->c); }
SymExpr operator-(const SymExpr& a, const SymExpr& b) { return SymExpr::constant(a.node()->c - b.node()->c); }
SymExpr operator*(const SymExpr& a, const SymExpr& b) { return SymExpr::constant(a.node()->c * b.node()->c); }
SymExpr SymExpr::floorDiv(const SymExpr& a, const SymExpr&) { return a; }
SymExpr SymExpr::ceilDiv(const SymExpr& a, const SymExpr&) { return a; }
SymExpr SymExpr::mod(const SymExpr& a, const SymExpr&) { return a; }
SymExpr SymExpr::min(const SymExpr& a, const SymExpr&) { return a; }
SymExpr SymExpr::max(const SymExpr& a, const SymExpr&) { return a; }
bool SymExpr::isConstant() const { return true; }
std::optional<int64_t> SymExpr::constantValue() const { return node_->c; }
std::optional<std::string> SymExpr::symbolName() const { return std::nullopt; }
bool SymExpr::operator==(const SymExpr& o) const { return node_->c == o.node_->c; }
bool SymExpr::operator<(const SymExpr& o) const { return node_->c < o.node_->c; }
uint64_t SymExpr::hash() const { return static_cast<uint64_t>(node_->c); }
std::string SymExpr::str() const { return std::to_string(node_->c); }
std::optional<int64_t> SymExpr::evaluate(const SymbolBinding&) const { return node_->c; }
SymExpr SymExpr::substitute(const std::map<std::string, SymExpr, std::less<>>&) const { return *this; }
void SymExpr::collectSymbols(std::set<std::string>&) const {}
SymBounds bounds(const SymExpr& e, const SymbolTable&) { return {e.node()->c, e.node()->c, 1}; }
bool provablyEqual(const SymExpr& a, const SymExpr& b, const SymbolTable&) { return a == b; }
bool provablyLE(const SymExpr&, const SymExpr&, const SymbolTable&) { return false; }
bool provablyLT(const SymExpr&, const SymExpr&, const SymbolTable&) { return false; }
bool provablyDivisible(const SymExpr&, int64_t, const SymbolTable&) { return false; }
Result<SymExpr> parseSymExpr(std::string_view, const Loc&) { return error(Loc{}, "not implemented yet"); }
} // namespace kiln
