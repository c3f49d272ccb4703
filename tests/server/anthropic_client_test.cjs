// The official `@anthropic-ai/sdk` npm client against `kvcache serve`: a message (text block,
// stop reason, usage), the same request streamed (the event sequence message_start,
// content_block_start, deltas, content_block_stop, message_delta, message_stop, and the same
// text at temperature 0), stop_sequences, count_tokens, and the client's typed errors for 400
// (missing max_tokens, tools, a tool_result block) and 401 (x-api-key).
// Usage: node anthropic_client_test.cjs NPM_DIR BASE_URL API_KEY
"use strict";
const { createRequire } = require("node:module");
const assert = require("node:assert/strict");
const [npmDir, baseURL, apiKey] = process.argv.slice(2);
const requireNpm = createRequire(npmDir + "/package.json");
const AnthropicModule = requireNpm("@anthropic-ai/sdk");
const Anthropic = AnthropicModule.default || AnthropicModule.Anthropic || AnthropicModule;

async function main() {
  const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });
  const ask = { model: "tiny", max_tokens: 12, temperature: 0, system: "Be brief.",
                messages: [{ role: "user", content: "Hello there" }] };
  const msg = await client.messages.create(ask);
  assert.equal(msg.type, "message");
  assert.equal(msg.role, "assistant");
  assert.equal(msg.model, "tiny");
  assert.ok(msg.id.startsWith("msg_"));
  assert.equal(msg.content.length, 1);
  assert.equal(msg.content[0].type, "text");
  assert.ok(["end_turn", "max_tokens"].includes(msg.stop_reason));
  assert.ok(msg.usage.output_tokens >= 1 && msg.usage.output_tokens <= 12);
  assert.ok(msg.usage.input_tokens >= 1);

  const types = [];
  let text = "", final = null;
  const stream = await client.messages.create({ ...ask, stream: true });
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === "content_block_delta") text += ev.delta.text;
    if (ev.type === "message_delta") final = ev;
  }
  const order = types.filter((t) => t !== "content_block_delta" && t !== "ping");
  assert.deepEqual(order, ["message_start", "content_block_start", "content_block_stop",
                           "message_delta", "message_stop"]);
  assert.equal(text, msg.content[0].text);  // temperature 0: the same answer
  assert.equal(final.delta.stop_reason, msg.stop_reason);
  assert.equal(final.usage.output_tokens, msg.usage.output_tokens);

  // A stop sequence taken from the answer itself ends it there and is reported.
  const long = await client.messages.create({ ...ask, max_tokens: 24 });
  const said = long.content[0].text;
  if (said.length >= 4) {
    const stop = said.slice(2, 4);
    const cut = await client.messages.create({ ...ask, max_tokens: 24, stop_sequences: [stop] });
    assert.equal(cut.stop_reason, "stop_sequence");
    assert.equal(cut.stop_sequence, stop);
    assert.equal(cut.content[0].text, said.slice(0, said.indexOf(stop)));
  }

  const counted = await client.messages.countTokens({ model: "tiny", system: ask.system,
                                                      messages: ask.messages });
  assert.equal(counted.input_tokens, msg.usage.input_tokens + (msg.usage.cache_read_input_tokens || 0));

  await assert.rejects(client.messages.create({ model: "tiny", messages: ask.messages }),
    (e) => e instanceof Anthropic.BadRequestError && e.status === 400 &&
           e.error.error.type === "invalid_request_error" &&
           e.error.error.message === "'max_tokens' is required");
  await assert.rejects(client.messages.create({ ...ask, tools: [{ name: "f",
      input_schema: { type: "object" } }] }),
    (e) => e instanceof Anthropic.BadRequestError && e.error.error.message.includes("'tools'"));
  await assert.rejects(client.messages.create({ ...ask, messages: [{ role: "user", content: [
      { type: "tool_result", tool_use_id: "x", content: "1" }] }] }),
    (e) => e instanceof Anthropic.BadRequestError &&
           e.error.error.message.includes("'messages[0].content[0].type'"));
  const wrong = new Anthropic({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(wrong.messages.create(ask),
    (e) => e instanceof Anthropic.AuthenticationError && e.status === 401 &&
           e.error.error.type === "authentication_error");
  console.log("anthropic client: PASS (" + JSON.stringify(text) + ")");
}

main().catch((e) => { console.error("FAIL:", e); process.exit(1); });
