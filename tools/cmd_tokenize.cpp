// kvcache tokenize MODEL (--text S | --text-file F) [--no-bos] [--no-parse-special] [--json]:
// the ids the model's tokenizer gives a text, on one line separated by single spaces, or
// {"ids": [...], "pieces": [...]} (pieces = the vocabulary's spelling of each id). Reads only
// the vocabulary: works on vocabulary-only GGUF files. Thin over engine/tokenizer.h.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/str_cat.h"
#include "text/tokenizer.h"
#include "program/gguf.h"

namespace kvcache::tools {
namespace {

constexpr uintmax_t kMaxTokenizeTextBytes = uintmax_t{1} << 30;

struct TokenizeArgs {
  std::string model, text, text_file;
  bool no_bos = false;
  bool no_parse_special = false;
  bool json = false;
};

Result<std::string> read_text(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return not_found("--text-file: cannot read " + path + ": " + ec.message());
  if (size > kMaxTokenizeTextBytes)
    return invalid_argument(str_cat("--text-file: ", path, " has ", size,
                                    " bytes, expected at most 2^30"));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in && !in.eof()) return data_loss("--text-file: reading " + path + " failed");
  return ss.str();
}

int run_tokenize(const TokenizeArgs& a) {
  std::string text = a.text;
  if (!a.text_file.empty()) {
    Result<std::string> t = read_text(a.text_file);
    if (!t.ok()) return fail("tokenize", t.status().message());
    text = std::move(*t);
  }
  Result<gguf::GgufFile> file = gguf::GgufFile::open(a.model);
  if (!file.ok()) return fail("tokenize", file.status().message());
  Result<text::Tokenizer> tok = text::Tokenizer::from_gguf(*file);
  if (!tok.ok()) return fail("tokenize", tok.status().message());
  text::EncodeOptions o;
  o.add_special = !a.no_bos;
  o.parse_special = !a.no_parse_special;
  Result<std::vector<int32_t>> ids = tok->encode(text, o);
  if (!ids.ok()) return fail("tokenize", ids.status().message());
  if (a.json) {
    nlohmann::json j;
    j["ids"] = *ids;
    j["pieces"] = nlohmann::json::array();
    for (int32_t id : *ids) j["pieces"].push_back(tok->piece(id));
    const std::string out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", out.c_str());
    return 0;
  }
  std::string line;
  for (int32_t id : *ids) line += str_cat((line.empty() ? "" : " "), id);
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* sub = app.add_subcommand("tokenize", "Print the token ids of a text (vocabulary only)");
  sub->add_option("model", args->model, "GGUF file with a tokenizer.ggml.* vocabulary")->required();
  CLI::Option* text = sub->add_option("--text", args->text, "Text to tokenize");
  CLI::Option* file =
      sub->add_option("--text-file", args->text_file, "File whose bytes to tokenize");
  text->excludes(file);
  sub->add_flag("--no-bos", args->no_bos, "Add neither BOS nor EOS (default: as the file says)");
  sub->add_flag("--no-parse-special", args->no_parse_special,
                "Control-token text is plain text (default: parsed into those tokens)");
  sub->add_flag("--json", args->json, "Print {\"ids\": [...], \"pieces\": [...]}");
  return [args, text, file] {
    if (text->count() == 0 && file->count() == 0) {
      std::fprintf(stderr, "kvcache tokenize: one of --text or --text-file is required\n");
      return 2;
    }
    return run_tokenize(*args);
  };
}

}  // namespace kvcache::tools
