// pretokenizer_split: a test driver for pretokenizer_oracle.py. Reads lines "NAME\tHEX" (a
// pre-tokenizer name, the text's bytes in hex) from stdin and prints, per line, the pieces as
// hex joined by ',' (an empty line for no pieces; "ERR" for an unknown name). Layer: tests.
#include <cstdio>
#include <iostream>
#include <string>

#include "text/pretokenizer.h"

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) return 2;
    std::string text;
    for (size_t i = tab + 1; i + 1 < line.size(); i += 2) {
      const int hi = hex_value(line[i]), lo = hex_value(line[i + 1]);
      if (hi < 0 || lo < 0) return 2;
      text += static_cast<char>(hi * 16 + lo);
    }
    auto pre = kvcache::text::PreTokenizer::from_name(line.substr(0, tab));
    if (!pre.ok()) {
      std::cout << "ERR\n";
      continue;
    }
    std::string out;
    for (std::string_view piece : pre->split(text)) {
      if (!out.empty()) out += ',';
      for (unsigned char c : piece) {
        out += "0123456789abcdef"[c >> 4];
        out += "0123456789abcdef"[c & 15];
      }
    }
    std::cout << out << '\n';
  }
  return 0;
}
