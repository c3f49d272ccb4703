// The chat page served at GET /: one self-contained HTML document (no external scripts,
// styles or fonts) that keeps the conversation in the page and streams each answer from
// /v1/chat/completions. Layer: server.
#include "server/http_server.h"

namespace kvcache::server {

const char* const kChatPageHtml = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvcache chat</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; background: #f4f4f6; color: #222; }
  header { padding: 10px 16px; background: #223; color: #fff; display: flex; gap: 12px; align-items: center; }
  header input { width: 200px; }
  #log { max-width: 820px; margin: 0 auto; padding: 16px; min-height: 60vh; }
  .msg { white-space: pre-wrap; padding: 10px 14px; border-radius: 8px; margin: 8px 0; }
  .user { background: #dfe8ff; margin-left: 15%; }
  .assistant { background: #fff; margin-right: 15%; border: 1px solid #ddd; }
  .error { background: #ffe0e0; }
  form { max-width: 820px; margin: 0 auto; display: flex; gap: 8px; padding: 0 16px 16px; }
  textarea { flex: 1; height: 60px; font: inherit; }
  button { padding: 0 18px; }
</style>
</head>
<body>
<header><strong>kvcache chat</strong>
  <label>max tokens <input id="max" type="number" value="128" min="1" style="width:70px"></label>
  <label>API key <input id="key" type="password" placeholder="(none)"></label>
  <button id="clear" type="button">Clear</button>
</header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Type a message; Enter sends, Shift+Enter breaks the line"></textarea>
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const log = document.getElementById("log"), input = document.getElementById("input");
const form = document.getElementById("form"), send = document.getElementById("send");
let messages = [];

function bubble(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  log.appendChild(div);
  div.scrollIntoView();
  return div;
}

async function ask() {
  const text = input.value;
  if (!text.trim()) return;
  input.value = "";
  messages.push({ role: "user", content: text });
  bubble("user", text);
  const out = bubble("assistant", "");
  send.disabled = true;
  const headers = { "Content-Type": "application/json" };
  const key = document.getElementById("key").value;
  if (key) headers["Authorization"] = "Bearer " + key;
  let answer = "";
  try {
    const res = await fetch("/v1/chat/completions", { method: "POST", headers,
      body: JSON.stringify({ messages, stream: true,
                             max_tokens: Number(document.getElementById("max").value) || 128 }) });
    if (!res.ok) {
      const body = await res.json().catch(() => ({}));
      throw new Error((body.error && body.error.message) || ("HTTP " + res.status));
    }
    const reader = res.body.getReader(), decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        const delta = chunk.choices.length ? chunk.choices[0].delta : {};
        if (delta.content) { answer += delta.content; out.textContent = answer; }
      }
    }
    messages.push({ role: "assistant", content: answer });
  } catch (e) {
    out.className = "msg error";
    out.textContent = "error: " + e.message;
    messages.pop();
  } finally {
    send.disabled = false;
    out.dataset.done = "1";
  }
}

form.addEventListener("submit", (e) => { e.preventDefault(); ask(); });
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); ask(); }
});
document.getElementById("clear").addEventListener("click", () => { messages = []; log.textContent = ""; });
</script>
</body>
</html>
)HTML";

}  // namespace kvcache::server
