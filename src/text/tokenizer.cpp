// Special tokens, BOS/EOS, dispatch and decoding. See tokenizer.h.
#include "text/tokenizer.h"
#include "program/gguf_keys.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "core/str_cat.h"
#include "text/pretokenizer.h"
#include "text/tokenizer_bpe.h"
#include "text/tokenizer_spm.h"
#include "text/vocab.h"

namespace kvcache::text {


struct Tokenizer::Impl {
  Vocab vocab;
  std::optional<SpmEncoder> spm;
  std::optional<BpeEncoder> bpe;
  std::string name;
  // Tokens matched in text, bucketed by first byte, longest first: CONTROL/UNKNOWN (only when
  // parse_special) and USER_DEFINED (always).
  std::vector<std::vector<int32_t>> special_by_byte = std::vector<std::vector<int32_t>>(256);

  void index_specials() {
    for (int32_t id = 0; id < vocab.size(); ++id) {
      const TokenType t = vocab.type(id);
      const bool special = t == TokenType::kControl || t == TokenType::kUserDefined ||
                           t == TokenType::kUnknown;
      const std::string& s = vocab.tokens[static_cast<size_t>(id)];
      if (special && !s.empty()) special_by_byte[static_cast<unsigned char>(s[0])].push_back(id);
    }
    auto len = [&](int32_t id) { return vocab.tokens[static_cast<size_t>(id)].size(); };
    for (auto& b : special_by_byte)
      std::stable_sort(b.begin(), b.end(), [&](int32_t x, int32_t y) { return len(x) > len(y); });
  }
  // The special token spelled at text[pos], longest first; -1 when none. Only USER_DEFINED
  // tokens unless parse_special; a CONTROL spelling must end by `control_end`.
  int32_t special_at(std::string_view text, size_t pos, bool parse_special,
                     size_t control_end) const {
    for (int32_t id : special_by_byte[static_cast<unsigned char>(text[pos])]) {
      const bool user = vocab.type(id) == TokenType::kUserDefined;
      if (!parse_special && !user) continue;
      const std::string& s = vocab.tokens[static_cast<size_t>(id)];
      if (!user && pos + s.size() > control_end) continue;
      if (text.compare(pos, s.size(), s) == 0) return id;
    }
    return -1;
  }
  Status encode_raw(std::string_view run, bool after_special, std::vector<int32_t>& out) const {
    if (spm) return spm->encode(run, after_special && vocab.add_space_prefix, out);
    return bpe->encode(run, out);
  }
};

namespace {

// vocab <= 0: the token count decides; else the list must fit in the model's rows.
Status check_fits(const Vocab& v, int32_t vocab) {
  if (vocab > 0 && v.size() > vocab)
    return invalid_argument(str_cat("tokenizer: tokenizer.ggml.tokens has ", v.size(),
                                    " entries, the model's vocab is ", vocab));
  return ok_status();
}

}  // namespace

Tokenizer Tokenizer::bytes() { return Tokenizer(); }

Result<Tokenizer> Tokenizer::bpe(std::vector<std::string> tokens,
                                 const std::vector<std::string>& merges, std::string_view pre) {
  Result<PreTokenizer> p = PreTokenizer::from_name(pre);
  if (!p.ok()) return p.status();
  auto impl = std::make_shared<Impl>();
  impl->vocab.tokens = std::move(tokens);
  finish_vocab(impl->vocab);
  Result<BpeEncoder> e = BpeEncoder::build(impl->vocab, merges, std::move(*p), false);
  if (!e.ok()) return e.status();
  impl->bpe.emplace(std::move(*e));
  impl->name = "bpe (" + std::string(pre) + ")";
  impl->index_specials();
  Tokenizer t;
  t.kind_ = Kind::kBpe;
  t.impl_ = std::move(impl);
  return t;
}

Result<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& file) {
  int32_t vocab = 0;
  const gguf::TensorInfo* e = file.tensor("token_embd.weight");
  if (e != nullptr && e->dims.size() == 2)
    vocab = static_cast<int32_t>(std::min<int64_t>(e->dims[1], int64_t{1} << 30));
  return from_gguf(file, vocab);
}

Result<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& file, int32_t vocab) {
  Result<std::string> model = file.get_string(gguf::key_pattern(gguf::Key::kTokenizerModel));
  if (!model.ok() && model.status().code() != StatusCode::kNotFound)
    return Status(model.status().code(), "tokenizer: " + model.status().message());
  // No key, or llama.cpp's names for a model without a vocabulary: ids are raw bytes.
  if (!model.ok() || *model == "none" || *model == "no_vocab") {
    if (vocab > 0 && vocab < 256)
      return invalid_argument(
          str_cat("tokenizer: raw-byte tokens need vocab >= 256, the model has ", vocab));
    return bytes();
  }
  const bool spm = *model == "llama";
  if (!spm && *model != "gpt2")
    return invalid_argument("tokenizer: tokenizer.ggml.model = \"" + *model +
                            "\" is not supported, expected \"llama\" (SentencePiece), \"gpt2\" "
                            "(byte-level BPE), \"none\" or no key (raw bytes)");
  std::string pre_name = "gpt-2";  // a BPE file written before the key existed
  if (!spm) {
    Result<std::string> pre = file.get_string(gguf::key_pattern(gguf::Key::kTokenizerPre));
    if (pre.ok()) pre_name = *pre;
    else if (pre.status().code() != StatusCode::kNotFound)
      return Status(pre.status().code(), "tokenizer: " + pre.status().message());
  }
  std::optional<PreTokenizer> pre;
  if (!spm) {
    Result<PreTokenizer> p = PreTokenizer::from_name(pre_name);
    if (!p.ok()) return p.status();
    pre.emplace(std::move(*p));
  }
  // BOS by default: SentencePiece and Llama 3; the file's add_bos_token overrides.
  Result<Vocab> v = read_vocab(file, spm || pre_name == "llama-bpe");
  if (!v.ok()) return v.status();
  KVCACHE_RETURN_IF_ERROR(check_fits(*v, vocab));
  auto impl = std::make_shared<Impl>();
  impl->vocab = std::move(*v);
  Tokenizer t;
  if (spm) {
    impl->spm.emplace(impl->vocab);
    impl->name = "spm";
    t.kind_ = Kind::kSpm;
  } else {
    std::vector<std::string> merges;
    Result<std::vector<std::string>> m = file.get_string_array(gguf::key_pattern(gguf::Key::kTokenizerMerges));
    if (m.ok()) merges = std::move(*m);
    else if (m.status().code() != StatusCode::kNotFound)
      return Status(m.status().code(), "tokenizer: " + m.status().message());
    Result<BpeEncoder> e =
        BpeEncoder::build(impl->vocab, merges, std::move(*pre), pre_name == "llama-bpe");
    if (!e.ok()) return e.status();
    impl->bpe.emplace(std::move(*e));
    impl->name = "bpe (" + pre_name + ")";
    t.kind_ = Kind::kBpe;
  }
  impl->index_specials();
  t.impl_ = std::move(impl);
  return t;
}

std::string_view Tokenizer::kind_name() const {
  if (impl_) return impl_->name;
  return "bytes";
}

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text,
                                               const EncodeOptions& options) const {
  std::vector<int32_t> out;
  if (!impl_) {
    for (unsigned char c : text) out.push_back(c);
    return out;
  }
  if (text.size() > (size_t{1} << 30))
    return invalid_argument(str_cat("tokenizer encode: the text has ", text.size(),
                                    " bytes, expected at most 2^30"));
  const Vocab& v = impl_->vocab;
  if (options.add_special && v.add_bos) out.push_back(v.bos);
  bool after_special = true;  // the start counts as a boundary (SentencePiece's space prefix)
  size_t run = 0;
  size_t range = 0;  // the first plain range that does not end at or before `pos`
  for (size_t pos = 0; pos <= text.size();) {
    while (range < options.plain.size() && options.plain[range].second <= pos) ++range;
    const size_t next_plain = range < options.plain.size() ? options.plain[range].first : text.size();
    const bool parse = options.parse_special && pos < next_plain;
    const int32_t id = pos < text.size() ? impl_->special_at(text, pos, parse, next_plain) : -1;
    if (id < 0 && pos < text.size()) {
      ++pos;
      continue;
    }
    if (pos > run) {
      KVCACHE_RETURN_IF_ERROR(impl_->encode_raw(text.substr(run, pos - run), after_special, out));
      after_special = false;
    }
    if (id < 0) break;  // end of text
    out.push_back(id);
    after_special = true;
    pos += v.tokens[static_cast<size_t>(id)].size();
    run = pos;
  }
  if (options.add_special && v.add_eos) out.push_back(v.eos);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (!impl_) {
      if (id >= 0 && id < 256) out += static_cast<char>(id);
      continue;
    }
    if (id < 0 || id >= impl_->vocab.size()) continue;
    const std::vector<int32_t>& shown = impl_->vocab.shown;
    if (std::binary_search(shown.begin(), shown.end(), id)) out += impl_->vocab.tokens[id];
    else out += impl_->spm ? spm_piece_text(impl_->vocab, id) : bpe_piece_text(impl_->vocab, id);
  }
  return out;
}

std::string Tokenizer::piece(int32_t id) const {
  if (!impl_) return id >= 0 && id < 256 ? std::string(1, static_cast<char>(id)) : std::string();
  if (id < 0 || id >= impl_->vocab.size()) return {};
  return impl_->vocab.tokens[static_cast<size_t>(id)];
}

int32_t Tokenizer::n_tokens() const { return impl_ ? impl_->vocab.size() : 256; }
int32_t Tokenizer::bos() const { return impl_ ? impl_->vocab.bos : -1; }
int32_t Tokenizer::eos() const { return impl_ ? impl_->vocab.eos : -1; }

const std::vector<int32_t>& Tokenizer::eog_ids() const {
  static const std::vector<int32_t> kNone;
  return impl_ ? impl_->vocab.eog : kNone;
}

bool Tokenizer::is_eog(int32_t id) const {
  const std::vector<int32_t>& e = eog_ids();
  return std::binary_search(e.begin(), e.end(), id);
}

}  // namespace kvcache::text
