// The Jinja oracle of the chat template tests: renders cases with a model's real template
// through tests/text/render_chat_template.py (python3-jinja2). Test helper, text layer.
// It does not compare anything; callers skip when have_jinja() is false.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kvcache::text {

inline bool have_jinja() {
  return std::system("/usr/bin/python3 -c 'import jinja2' >/dev/null 2>&1") == 0;
}

inline std::string chat_fixture(const std::string& name) {
  return std::string(KVCACHE_FIXTURES) + "/chat_templates/" + name;
}

// cases_json: the script's CASES.json text. A JSON list of {"text"} / {"error"} per case, or a
// null value when the script failed.
inline nlohmann::json run_jinja(const std::string& template_file, const std::string& cases_json) {
  // One file per template and process: ctest runs the cases of several builds at once.
  static int serial = 0;
  const std::string cases_path = ::testing::TempDir() + "chat_cases_" +
                                 std::filesystem::path(template_file).stem().string() + "_" +
                                 std::to_string(getpid()) + "_" + std::to_string(serial++) +
                                 ".json";
  std::ofstream(cases_path) << cases_json;
  const std::string cmd = std::string("/usr/bin/python3 ") + KVCACHE_RENDER_SCRIPT + " '" +
                          template_file + "' '" + cases_path + "'";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return nlohmann::json();
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = pclose(p);
  std::filesystem::remove(cases_path);
  if (rc != 0) return nlohmann::json();
  return nlohmann::json::parse(out, nullptr, false);
}

}  // namespace kvcache::text
