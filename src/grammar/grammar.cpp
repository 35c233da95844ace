#include "grammar/grammar.h"

#include "core/check.h"

namespace ferry::grammar {

namespace {

// A rule can match the empty string (fixpoint over all rules).
std::vector<bool> nullable_rules(const Grammar& g) {
  std::vector<bool> nullable(g.rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      if (nullable[r]) continue;
      for (uint32_t start : g.rules[r].alternatives) {
        bool all = true;
        for (uint32_t e = start; g.elements[e].kind != ElementKind::End; ++e) {
          const Element& el = g.elements[e];
          if (el.kind == ElementKind::Bytes || !nullable[el.index]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

}  // namespace

void validate_grammar(const Grammar& g) {
  FERRY_CHECK(g.root < g.rules.size(), "grammar: root rule out of range");
  for (const auto& rule : g.rules) {
    for (uint32_t start : rule.alternatives) {
      uint32_t e = start;
      for (; e < g.elements.size() && g.elements[e].kind != ElementKind::End; ++e) {
        const Element& el = g.elements[e];
        FERRY_CHECK(el.kind != ElementKind::Rule || el.index < g.rules.size(),
                    "grammar: rule '{}' references a rule out of range", rule.name);
        FERRY_CHECK(el.kind != ElementKind::Bytes || el.index < g.byte_sets.size(),
                    "grammar: rule '{}' references a byte set out of range", rule.name);
      }
      FERRY_CHECK(e < g.elements.size(), "grammar: rule '{}' has an unterminated alternative", rule.name);
    }
  }
  // Left corners: r -> s when s can start r (after nullable elements). A cycle is left recursion, which a
  // top-down matcher cannot expand; iterative DFS with colours (0 new, 1 on the path, 2 done).
  const auto nullable = nullable_rules(g);
  std::vector<std::vector<uint32_t>> corners(g.rules.size());
  for (size_t r = 0; r < g.rules.size(); ++r) {
    for (uint32_t start : g.rules[r].alternatives) {
      for (uint32_t e = start; g.elements[e].kind == ElementKind::Rule; ++e) {
        corners[r].push_back(g.elements[e].index);
        if (!nullable[g.elements[e].index]) break;
      }
    }
  }
  std::vector<uint8_t> colour(g.rules.size(), 0);
  std::vector<std::pair<uint32_t, size_t>> path;
  for (uint32_t s = 0; s < g.rules.size(); ++s) {
    if (colour[s]) continue;
    path.push_back({s, 0});
    colour[s] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == corners[r].size()) {
        colour[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t next = corners[r][i++];
      FERRY_CHECK(colour[next] != 1, "grammar: rule '{}' is left-recursive", g.rules[next].name);
      if (colour[next] == 0) {
        colour[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
}

}  // namespace ferry::grammar
