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

// What joins two messages' texts: "\n" between two that are not empty.
std::string_view separator(std::string_view a, std::string_view b) {
  return a.empty() || b.empty() ? "" : "\n";
}

void append(std::string& to, std::string_view text) {
  to += separator(to, text);
  to += text;
}

// join(a, b) from byte `from` on ("" when it is shorter).
std::string joined_from(std::string_view a, std::string_view b, size_t from) {
  std::string out;
  for (std::string_view piece : {a, separator(a, b), b}) {
    if (from >= piece.size()) {
      from -= piece.size();
      continue;
    }
    out += piece.substr(from);
    from = 0;
  }
  return out;
}

// Reads the reply's messages from a message's beginning on: those that end go into `done`
// (never read again by a HarmonyStream), the rest of the reply into `open`.
struct Reader {
  std::string_view text;
  bool calls, partial;
  ParsedAnswer& done;
  ParsedAnswer open{};
  size_t ended = 0;  // where the text after the last message that ended begins
  bool verbatim = false;  // `open` is the rest of the reply as written, whatever follows

  // One message written from `from`, its header from `header`; returns where the next
  // begins, or npos when the reply ends here.
  size_t message(size_t from, size_t header) {
    const size_t m = text.find(kMessage, header);
    if (m == std::string_view::npos) {  // a header cut short
      if (!partial) append(open.content, text.substr(from));
      return std::string_view::npos;
    }
    const std::string_view head = text.substr(header, m - header);
    std::string_view body = text.substr(m + kMessage.size());
    size_t next = 0;
    const size_t end = body_end(body, next);
    const bool is_open = end == std::string_view::npos;
    if (!is_open) body = body.substr(0, end);
    ParsedAnswer& out = is_open ? open : done;
    const std::string_view channel = header_word(head, kChannel);
    const std::string_view to = header_word(head, "to=");
    if (to.empty()) {
      const std::string_view shown = is_open && partial ? settled(body) : body;
      append(channel == "analysis" ? out.reasoning : out.content, shown);
    } else if (!(is_open && partial) && !call(to, body, out)) {  // as written
      append(out.content, text.substr(from, m + kMessage.size() + body.size() - from));
    }
    if (is_open) return std::string_view::npos;
    ended = m + kMessage.size() + next;
    return ended;
  }

  // A message to functions.NAME whose text is a JSON object; false for anything else.
  bool call(std::string_view to, std::string_view body, ParsedAnswer& out) const {
    constexpr std::string_view kNs = "functions.";
    if (!calls || !begins(to, kNs) || to.size() == kNs.size()) return false;
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return false;
    out.calls.push_back({std::string(to.substr(kNs.size())), j.dump()});
    return true;
  }

  // From `at`: 0 (the reply's beginning) or where a message that ended left off.
  void run(size_t at) {
    ended = at;  // a reply may also repeat the prompt's <|start|>assistant
    if (at == 0 && !begins(text, kStart)) {
      bool framed = false, pending = may_become(text, kStart);
      for (std::string_view s : kHeaderStarts) {
        framed |= begins(text, s);
        pending |= may_become(text, s);
      }
      if (!framed) {
        if (!pending) verbatim = true;
        if (!(pending && partial)) open.content = std::string(text);
        return;
      }
      at = message(0, 0);
    }
    while (at != std::string_view::npos && at < text.size()) {
      const std::string_view rest = text.substr(at);
      if (!begins(rest, kStart)) {  // not a message: the rest as written
        if (!may_become(rest, kStart)) verbatim = true;
        if (!(partial && may_become(rest, kStart))) append(open.content, rest);
        return;
      }
      at = message(at, at + kStart.size());
    }
  }
};

}  // namespace

ParsedAnswer parse_harmony(std::string_view text, bool calls, bool partial) {
  ParsedAnswer done;
  Reader r{text, calls, partial, done};
  r.run(0);
  append(done.content, r.open.content);
  append(done.reasoning, r.open.reasoning);
  for (ParsedToolCall& c : r.open.calls) done.calls.push_back(std::move(c));
  return done;
}

void HarmonyStream::read(std::string_view reply, bool partial) {
  if (verbatim_) {  // only the new bytes, as written
    read_from_ = read_to_;
    open_.content += reply.substr(read_to_);
    read_to_ = reply.size();
    return;
  }
  Reader r{reply, calls_, partial, done_};
  r.run(at_);
  read_from_ = at_;
  read_to_ = reply.size();
  at_ = r.ended;
  verbatim_ = r.verbatim;
  open_ = std::move(r.open);
}

std::string HarmonyStream::content_from(size_t from) const {
  return joined_from(done_.content, open_.content, from);
}

std::string HarmonyStream::reasoning_from(size_t from) const {
  return joined_from(done_.reasoning, open_.reasoning, from);
}

std::vector<ParsedToolCall> HarmonyStream::calls() const {
  std::vector<ParsedToolCall> all = done_.calls;
  all.insert(all.end(), open_.calls.begin(), open_.calls.end());
  return all;
}

}  // namespace kvcache::text
