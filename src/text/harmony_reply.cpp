// A harmony (gpt-oss) reply split into its messages: reasoning, content and calls. See
// parse_harmony in tool_calls.h.
#include <nlohmann/json.hpp>

#include "text/chat_writer.h"
#include "text/tool_calls.h"

namespace kvcache::text {
namespace {

constexpr std::string_view kStart = "<|start|>", kMessage = "<|message|>",
                           kChannel = "<|channel|>";
// What ends a message's text: <|call|> and <|return|> end generation too (usually unseen).
constexpr std::string_view kEnds[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
// How the first message's header can begin, right after the prompt's <|start|>assistant.
constexpr std::string_view kHeaderStarts[] = {"<|channel|>", " to=", "<|constrain|>",
                                              "<|message|>"};

bool begins(std::string_view s, std::string_view with) { return s.substr(0, with.size()) == with; }

// s is a proper beginning of `whole` (more text may complete it).
bool may_become(std::string_view s, std::string_view whole) {
  return s.size() < whole.size() && whole.substr(0, s.size()) == s;
}

// The word after `key` in a header, up to a space or a token; empty when absent.
std::string_view header_word(std::string_view header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string_view::npos) return {};
  const std::string_view rest = header.substr(at + key.size());
  return rest.substr(0, rest.find_first_of(" <"));
}

// Where a message's text ends (npos: not yet) and, when it does, after which token.
size_t body_end(std::string_view body, size_t& next) {
  size_t end = std::string_view::npos;
  for (std::string_view e : kEnds)
    if (const size_t at = body.find(e); at < end) {
      end = at;
      next = at + (e == kStart ? 0 : e.size());
    }
  return end;
}

// In a reply still being generated: the text of an open message without an end token's
// beginning it may close with.
std::string_view settled(std::string_view body) {
  const size_t lt = body.rfind('<');
  if (lt == std::string_view::npos) return body;
  for (std::string_view e : kEnds)
    if (may_become(body.substr(lt), e)) return body.substr(0, lt);
  return body;
}

void append(std::string& to, std::string_view text) {
  if (text.empty()) return;
  if (!to.empty()) to += '\n';
  to += text;
}

struct Reader {
  std::string_view text;
  bool calls, partial;
  ParsedAnswer out;

  // One message written from `from`, its header from `header`; returns where the next
  // begins, or npos when the reply ends here.
  size_t message(size_t from, size_t header) {
    const size_t m = text.find(kMessage, header);
    if (m == std::string_view::npos) {  // a header cut short
      if (!partial) append(out.content, text.substr(from));
      return std::string_view::npos;
    }
    const std::string_view head = text.substr(header, m - header);
    std::string_view body = text.substr(m + kMessage.size());
    size_t next = 0;
    const size_t end = body_end(body, next);
    const bool open = end == std::string_view::npos;
    if (!open) body = body.substr(0, end);
    const std::string_view channel = header_word(head, kChannel);
    const std::string_view to = header_word(head, "to=");
    if (to.empty()) {
      const std::string_view shown = open && partial ? settled(body) : body;
      append(channel == "analysis" ? out.reasoning : out.content, shown);
    } else if (!(open && partial) && !call(to, body)) {  // as written
      append(out.content, text.substr(from, m + kMessage.size() + body.size() - from));
    }
    return open ? std::string_view::npos : m + kMessage.size() + next;
  }

  // A message to functions.NAME whose text is a JSON object; false for anything else.
  bool call(std::string_view to, std::string_view body) {
    constexpr std::string_view kNs = "functions.";
    if (!calls || !begins(to, kNs) || to.size() == kNs.size()) return false;
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return false;
    out.calls.push_back({std::string(to.substr(kNs.size())), j.dump()});
    return true;
  }

  void run() {
    size_t at = 0;  // a reply may also repeat the prompt's <|start|>assistant
    if (!begins(text, kStart)) {
      bool framed = false, pending = may_become(text, kStart);
      for (std::string_view s : kHeaderStarts) {
        framed |= begins(text, s);
        pending |= may_become(text, s);
      }
      if (!framed) {
        if (!(pending && partial)) out.content = std::string(text);
        return;
      }
      at = message(0, 0);
    }
    while (at != std::string_view::npos && at < text.size()) {
      const std::string_view rest = text.substr(at);
      if (!begins(rest, kStart)) {  // not a message: the rest as written
        if (!(partial && may_become(rest, kStart))) append(out.content, rest);
        return;
      }
      at = message(at, at + kStart.size());
    }
  }
};

}  // namespace

ParsedAnswer parse_harmony(std::string_view text, bool calls, bool partial) {
  Reader r{text, calls, partial, {}};
  r.run();
  return std::move(r.out);
}

}  // namespace kvcache::text
