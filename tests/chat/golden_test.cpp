// Renders every case of tests/golden/chat_templates.json (made by reference/make_chat_template_golden.py with
// transformers' apply_chat_template) and compares byte for byte; expected errors must be errors, and
// raise_exception() messages must match exactly.
#include <gtest/gtest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "fixtures/test_paths.h"
#include "formats/gguf.h"
#include "tokenizer/chat_template.h"

namespace ferry {
namespace {

std::tm golden_clock() {  // the instant the golden script pins strftime_now() to
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 9;
  tm.tm_min = 30;
  tm.tm_wday = 5;
  tm.tm_yday = 207;
  return tm;
}

std::string show_diff(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 80 ? i - 80 : 0;
  return "first difference at byte " + std::to_string(i) + " (expected " + std::to_string(want.size()) +
         " bytes, got " + std::to_string(got.size()) + ")\n--- expected:\n" + want.substr(from, 240) +
         "\n--- got:\n" + got.substr(from, 240);
}

std::optional<std::string> template_source(const std::string& name, const nlohmann::ordered_json& golden) {
  if (name.rfind("builtin:", 0) == 0) {
    const std::string src = name == "builtin:chatml"   ? ChatTemplate::chatml_source()
                            : name == "builtin:llama3" ? ChatTemplate::llama3_source()
                                                       : ChatTemplate::mistral_source();
    EXPECT_EQ(src, golden["builtin_templates"][name].get<std::string>()) << "built-in template drifted: " << name;
    return src;
  }
  if (name.rfind("gguf:", 0) == 0) {
    const auto model = test::default_model();
    if (!model) return std::nullopt;
    return GgufFile::open(*model).get_string("tokenizer.chat_template");
  }
  const auto data = test::shared_testdata();
  if (!data) return std::nullopt;
  try {
    return test::read_file(*data + "/chat-templates/" + name);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

TEST(ChatGolden, EveryCaseMatchesTransformers) {
  const auto golden =
      nlohmann::ordered_json::parse(test::read_file(test::golden_dir() + "/chat_templates.json"));
  std::map<std::string, std::pair<int, int>> per_template;  // name -> (matched, total)
  std::map<std::string, std::unique_ptr<ChatTemplate>> cache;
  int skipped = 0, checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string name = c["template"];
    const std::string label = name + " / " + c["conversation"].get<std::string>() +
                              (c["context"]["add_generation_prompt"].get<bool>() ? " / gen" : "");
    auto it = cache.find(name);
    if (it == cache.end()) {
      const auto src = template_source(name, golden);
      std::unique_ptr<ChatTemplate> t;
      if (src) {
        t = std::make_unique<ChatTemplate>(*src, "<s>", "</s>");
        t->set_clock(golden_clock);
      }
      it = cache.emplace(name, std::move(t)).first;
    }
    if (!it->second) {
      ++skipped;
      continue;
    }
    ++checked;
    auto& [ok, total] = per_template[name];
    ++total;
    std::string got;
    std::string error;
    try {
      got = it->second->render(c["context"]);
    } catch (const Error& e) {
      error = e.what();
    }
    if (c.contains("expected")) {
      const std::string want = c["expected"];
      if (!error.empty()) {
        ADD_FAILURE() << label << ": expected text, got error: " << error;
      } else if (got != want) {
        ADD_FAILURE() << label << ": " << show_diff(want, got);
      } else {
        ++ok;
      }
    } else if (c.contains("expected_raise")) {
      if (error != c["expected_raise"].get<std::string>()) {
        ADD_FAILURE() << label << ": expected raise_exception(\"" << c["expected_raise"].get<std::string>()
                      << "\"), got " << (error.empty() ? "text" : "error: " + error);
      } else {
        ++ok;
      }
    } else {
      if (error.empty()) {
        ADD_FAILURE() << label << ": expected an error like \"" << c["expected_error"].get<std::string>()
                      << "\", got text:\n" << got;
      } else {
        ++ok;
      }
    }
  }
  for (const auto& [name, counts] : per_template)
    std::printf("[chat golden] %-60s %3d/%3d %s\n", name.c_str(), counts.first, counts.second,
                counts.first == counts.second ? "exact" : "MISMATCH");
  std::printf("[chat golden] %d cases checked, %d skipped (template not available)\n", checked, skipped);
  if (checked == 0) GTEST_SKIP() << "no golden template available";
}

}  // namespace
}  // namespace ferry
