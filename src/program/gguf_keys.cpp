// The key table's name expansion and KeyReader's typed getters (see gguf_keys.h).
#include "program/gguf_keys.h"

namespace kvcache::gguf {

std::string key_name(Key key, std::string_view arch) {
  const std::string_view pattern = key_pattern(key);
  if (!pattern.starts_with("%s")) return std::string(pattern);
  std::string out(arch);
  out.append(pattern.substr(2));
  return out;
}

Result<KeyReader> KeyReader::open(const GgufFile& file) {
  Result<std::string> arch = file.get_string(key_pattern(Key::kGeneralArchitecture));
  if (!arch.ok()) return arch.status();
  return KeyReader(file, std::move(arch).value());
}

const Value* KeyReader::find(Key key) const { return file_->find(name(key)); }

Result<int64_t> KeyReader::get_int(Key key) const { return file_->get_int(name(key)); }

Result<int64_t> KeyReader::get_int_or(Key key, int64_t fallback) const {
  const std::string n = name(key);
  if (file_->find(n) == nullptr) return fallback;
  return file_->get_int(n);
}

Result<double> KeyReader::get_float_or(Key key, double fallback) const {
  const std::string n = name(key);
  if (file_->find(n) == nullptr) return fallback;
  return file_->get_float(n);
}

Result<bool> KeyReader::get_bool_or(Key key, bool fallback) const {
  const std::string n = name(key);
  if (file_->find(n) == nullptr) return fallback;
  return file_->get_bool(n);
}

Result<std::string> KeyReader::get_string(Key key) const { return file_->get_string(name(key)); }

Result<std::vector<int64_t>> KeyReader::get_int_array(Key key) const {
  return file_->get_int_array(name(key));
}

}  // namespace kvcache::gguf
