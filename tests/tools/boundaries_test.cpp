// Folder boundaries: every quoted #include in src/, include/ferry/ and tools/ferry/ must name a folder that the
// including file's folder may depend on. The allowed-dependency table is read from docs/architecture.md
// (section "Boundaries", the rows between the boundaries-table markers), so the page and the check cannot
// drift apart: a new dependency means a new table entry, with its reason, in the same change.
//
// Module names: `core`, `formats`, ..., `backends/cpu`, `backends/cuda` (src/<name>), the folders inside a
// backend (`backends/cuda/matmul`: src/backends/cuda/matmul), `ferry` (include/ferry), `tools/ferry`. A row whose first cell is a file path (e.g. `tools/ferry/bench.cpp`) replaces its folder's row
// for that one file. Includes without a folder ("commands.h") and of external libraries ("fmt/format.h", whose
// first component is no module) are not checked. A source folder without a row fails the check.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fixtures/test_paths.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTableBegin = "<!-- boundaries-table:begin";
constexpr const char* kTableEnd = "<!-- boundaries-table:end";

// key (a module name, or a file path relative to the repository root) -> modules it may include
using Rules = std::map<std::string, std::set<std::string>>;

std::vector<std::string> backticked(const std::string& cell) {
  std::vector<std::string> out;
  static const std::regex tick("`([^`]+)`");
  for (auto it = std::sregex_iterator(cell.begin(), cell.end(), tick); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1].str());
  }
  return out;
}

// Rows "| `key` | `a`, `b` | why |" between the markers; "—" (no backticked name) in the second cell: nothing.
Rules parse_rules(const std::string& doc) {
  const size_t begin = doc.find(kTableBegin);
  const size_t end = doc.find(kTableEnd);
  if (begin == std::string::npos || end == std::string::npos || end < begin) return {};
  Rules rules;
  std::istringstream lines(doc.substr(begin, end - begin));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `", 0) != 0) continue;  // header, separator, markers
    std::vector<std::string> cells;
    std::stringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    if (cells.size() < 2) continue;
    const std::vector<std::string> key = backticked(cells[0]);
    if (key.size() != 1) continue;
    const std::vector<std::string> deps = backticked(cells[1]);
    rules[key[0]] = std::set<std::string>(deps.begin(), deps.end());
  }
  return rules;
}

bool is_file_key(const std::string& key) { return key.find('.') != std::string::npos; }

std::set<std::string> modules_of(const Rules& rules) {
  std::set<std::string> m;
  for (const auto& [key, deps] : rules) {
    if (!is_file_key(key)) m.insert(key);
  }
  return m;
}

// The module a repository-relative file belongs to: src/backends/cpu/x.cpp -> backends/cpu,
// src/backends/cuda/matmul/v.cu -> backends/cuda/matmul, src/tokenizer/jinja/y.cpp -> tokenizer,
// include/ferry/z.h -> ferry, tools/ferry/w.cpp -> tools/ferry.
std::string module_of_file(const std::string& rel) {
  const fs::path p(rel);
  std::vector<std::string> parts(p.begin(), p.end());
  if (parts.size() >= 3 && parts[0] == "src") {
    if (parts[1] == "backends" && parts.size() >= 5) return "backends/" + parts[2] + "/" + parts[3];
    if (parts[1] == "backends" && parts.size() >= 4) return "backends/" + parts[2];
    return parts[1];
  }
  if (parts.size() >= 3 && parts[0] == "include") return parts[1];
  if (parts.size() >= 3 && parts[0] == "tools") return "tools/" + parts[1];
  return "";
}

// The module a quoted include names, or "" when it names none (same-folder or external header).
std::string module_of_include(const std::string& inc, const std::set<std::string>& modules) {
  const size_t first = inc.find('/');
  if (first == std::string::npos) return "";
  const size_t second = inc.find('/', first + 1);
  const size_t third = second == std::string::npos ? second : inc.find('/', second + 1);
  if (third != std::string::npos && modules.count(inc.substr(0, third))) return inc.substr(0, third);
  if (second != std::string::npos && modules.count(inc.substr(0, second))) return inc.substr(0, second);
  if (modules.count(inc.substr(0, first))) return inc.substr(0, first);
  return "";
}

// One message per forbidden include of the file `rel` (repository-relative) with text `content`.
std::vector<std::string> check_file(const std::string& rel, const std::string& content, const Rules& rules) {
  const std::string module = module_of_file(rel);
  const auto own = rules.find(rel);
  const auto row = own != rules.end() ? own : rules.find(module);
  if (row == rules.end()) {
    return {rel + ": its folder '" + module + "' has no row in docs/architecture.md's boundaries table"};
  }
  const std::set<std::string> modules = modules_of(rules);
  std::vector<std::string> bad;
  static const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::istringstream lines(content);
  int n = 0;
  for (std::string line; std::getline(lines, line);) {
    ++n;
    std::smatch m;
    if (!std::regex_search(line, m, include_line)) continue;
    const std::string target = module_of_include(m[1].str(), modules);
    if (target.empty() || target == module || row->second.count(target)) continue;
    std::string allowed;
    for (const auto& a : row->second) allowed += (allowed.empty() ? "" : ", ") + a;
    bad.push_back(rel + ":" + std::to_string(n) + " includes \"" + m[1].str() + "\": " + row->first +
                  " may include only " + (allowed.empty() ? "itself" : allowed));
  }
  return bad;
}

bool is_source(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h" || e == ".cpp" || e == ".cu" || e == ".cuh";
}

TEST(Boundaries, TableParsesAndCheckerFlagsAViolation) {
  const std::string doc = std::string("intro\n") + kTableBegin + " -->\n| module | may include | why |\n|---|---|---|\n" +
                          "| `core` | — | base |\n| `model` | `core`, `ops` | forward |\n| `ops` | `core` | ops |\n" +
                          "| `backends/cpu` | `core`, `ops` | kernels |\n| `tools/ferry/x.cpp` | `model` | dev |\n" +
                          kTableEnd + " -->\n| `dist` | `model` | outside the markers |\n";
  const Rules rules = parse_rules(doc);
  ASSERT_EQ(rules.size(), 5u);
  EXPECT_TRUE(rules.at("core").empty());
  EXPECT_EQ(rules.at("model"), (std::set<std::string>{"core", "ops"}));
  EXPECT_EQ(rules.count("dist"), 0u);

  const std::string src = "#include <vector>\n#include \"ops/backend.h\"\n#include \"model/batch.h\"\n"
                          "#include \"local.h\"\n#include \"fmt/format.h\"\n  #  include \"backends/cpu/simd.h\"\n";
  const std::vector<std::string> bad = check_file("src/model/a.cpp", src, rules);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("src/model/a.cpp:6"), std::string::npos) << bad[0];
  EXPECT_TRUE(check_file("src/backends/cpu/k.cpp", src.substr(0, src.find("#include \"model")), rules).empty());
  EXPECT_EQ(check_file("src/kv/p.cpp", "", rules).size(), 1u);  // a folder without a row
  EXPECT_TRUE(check_file("tools/ferry/x.cpp", "#include \"model/batch.h\"\n", rules).empty());  // file row
  EXPECT_EQ(check_file("src/core/t.h", "#include \"ops/backend.h\"\n", rules).size(), 1u);
  // A backend's subfolders are modules of their own: each needs a row, and its includes are checked by it.
  const Rules sub = parse_rules(std::string(kTableBegin) + " -->\n| `backends/cuda` | `backends/cuda/mm` | top |\n" +
                                "| `backends/cuda/mm` | `core` | matmul |\n| `core` | — | base |\n" + kTableEnd + " -->\n");
  EXPECT_TRUE(check_file("src/backends/cuda/b.cpp", "#include \"backends/cuda/mm/p.h\"\n", sub).empty());
  EXPECT_EQ(check_file("src/backends/cuda/mm/p.cu", "#include \"backends/cuda/b.h\"\n", sub).size(), 1u);
  EXPECT_TRUE(check_file("src/backends/cuda/mm/p.cu", "#include \"core/check.h\"\n", sub).empty());
  EXPECT_EQ(check_file("src/backends/cuda/new/q.cu", "", sub).size(), 1u);  // a subfolder without a row
}

TEST(Boundaries, EveryIncludeRespectsTheTableInDocsArchitecture) {
  const fs::path root = test::source_dir();
  const Rules rules = parse_rules(test::read_file((root / "docs/architecture.md").string()));
  ASSERT_GE(rules.size(), 10u) << "docs/architecture.md has no boundaries table between the markers";
  std::vector<std::string> bad;
  size_t n_files = 0;
  for (const char* top : {"src", "include/ferry", "tools/ferry"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      if (!entry.is_regular_file() || !is_source(entry.path())) continue;
      const std::string rel = fs::relative(entry.path(), root).generic_string();
      const std::vector<std::string> b = check_file(rel, test::read_file(entry.path().string()), rules);
      bad.insert(bad.end(), b.begin(), b.end());
      ++n_files;
    }
  }
  EXPECT_GT(n_files, 100u);
  std::string all;
  for (const auto& b : bad) all += "  " + b + "\n";
  EXPECT_TRUE(bad.empty()) << bad.size() << " include(s) cross a folder boundary (docs/architecture.md, "
                           << "\"Boundaries\"):\n" << all;
}

}  // namespace
}  // namespace ferry
