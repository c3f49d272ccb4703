// grammar_sample: a test driver for json_schema_oracle.py. Reads one JSON Schema per line
// from stdin and prints, per schema, COUNT random documents of its grammar (a walk choosing
// uniformly among the bytes the matcher allows, stopping at a complete document with
// probability 1/4, or when nothing may follow), one per line as hex, then a line "--"; walks
// longer than 4000 bytes are dropped. A schema the compiler refuses prints "ERR message".
// Usage: grammar_sample COUNT SEED. Layer: tests.
#include <cstdio>
#include <iostream>
#include <random>
#include <string>

#include "text/grammar_matcher.h"
#include "text/json_schema.h"

int main(int argc, char** argv) {
  using namespace kvcache::text;
  if (argc != 3) return 2;
  const int count = std::stoi(argv[1]);
  std::mt19937_64 rng(std::stoull(argv[2]));
  std::string line;
  while (std::getline(std::cin, line)) {
    auto g = compile_json_schema(line);
    if (!g.ok()) {
      std::printf("ERR %s\n--\n", g.status().message().c_str());
      continue;
    }
    GrammarMatcher m(*g);
    for (int k = 0; k < count; ++k) {
      std::string doc;
      GrammarState s = m.start();
      while (doc.size() < 4000) {
        const ByteSet next = m.next_bytes(s);
        if (m.complete(s) && (next.empty() || rng() % 4 == 0)) break;
        int options = 0;
        for (int b = 0; b < 256; ++b) options += next.has(static_cast<uint8_t>(b));
        int pick = static_cast<int>(rng() % static_cast<uint64_t>(options));
        int b = 0;
        for (;; ++b)
          if (next.has(static_cast<uint8_t>(b)) && pick-- == 0) break;
        doc += static_cast<char>(b);
        s = m.advance(s, static_cast<uint8_t>(b));
      }
      if (!m.complete(s)) continue;
      for (unsigned char c : doc) std::printf("%02x", c);
      std::printf("\n");
    }
    std::printf("--\n");
  }
  return 0;
}
