// The official `@anthropic-ai/sdk` npm client against `kvcache serve`: a message (text block,
// stop reason, usage), the same request streamed (the event sequence message_start,
// content_block_start, deltas, content_block_stop, message_delta, message_stop, and the same
// text at temperature 0), stop_sequences, count_tokens, and the client's typed errors for 400
// (missing max_tokens, an image block) and 401 (x-api-key); then, on a server with a longer
// context (TOOLS_URL), tool use: a forced tool, whole and streamed (tool_use blocks whose input
// ajv validates against the tool's input_schema), and the call's tool_result sent back.
// Usage: node anthropic_client_test.cjs NPM_DIR BASE_URL API_KEY TOOLS_URL
"use strict";
const { createRequire } = require("node:module");
const assert = require("node:assert/strict");
const [npmDir, baseURL, apiKey, toolsURL] = process.argv.slice(2);
const requireNpm = createRequire(npmDir + "/package.json");
const AnthropicModule = requireNpm("@anthropic-ai/sdk");
const Anthropic = AnthropicModule.default || AnthropicModule.Anthropic || AnthropicModule;
const Ajv = requireNpm("ajv");

const weather = { type: "object", additionalProperties: false, required: ["city", "days"],
                  properties: { city: { enum: ["Oslo", "Rome"] },
                                days: { type: "integer", minimum: 1, maximum: 7 } } };
const tools = [{ name: "get_weather", description: "Weather", input_schema: weather },
               { name: "note", input_schema: { type: "object", properties: { text: { type: "string" } } } }];

async function toolUse() {
  const validate = new Ajv().compile(weather);
  const client = new Anthropic({ baseURL: toolsURL, apiKey, maxRetries: 0, timeout: 30000 });
  const ask = { model: "tools", max_tokens: 100, temperature: 1, tools,
                tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true },
                messages: [{ role: "user", content: "Weather in Rome?" }] };
  const msg = await client.messages.create(ask);
  assert.equal(msg.stop_reason, "tool_use");
  const uses = msg.content.filter((b) => b.type === "tool_use");
  assert.equal(uses.length, 1);
  assert.equal(uses[0].name, "get_weather");
  assert.ok(validate(uses[0].input), JSON.stringify(validate.errors));
  // Streamed: a tool_use block started with empty input, then its JSON in input_json_delta.
  let json = "", started = null, stop = null;
  for await (const ev of await client.messages.create({ ...ask, stream: true })) {
    if (ev.type === "content_block_start" && ev.content_block.type === "tool_use") started = ev;
    if (ev.type === "content_block_delta" && ev.delta.type === "input_json_delta") json += ev.delta.partial_json;
    if (ev.type === "message_delta") stop = ev.delta.stop_reason;
  }
  assert.ok(started && started.index >= 1 && started.content_block.name === "get_weather");
  assert.ok(validate(JSON.parse(json)), json);
  assert.equal(stop, "tool_use");
  // The call and its result go back: the conversation renders and a new answer comes.
  const next = await client.messages.create({ model: "tools", max_tokens: 8, tools, messages: [
    ask.messages[0], { role: "assistant", content: msg.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: uses[0].id, content: "Sunny" }] }] });
  assert.equal(next.type, "message");
  await assert.rejects(client.messages.create({ ...ask, tool_choice: { type: "tool", name: "nope" } }),
    (e) => e instanceof Anthropic.BadRequestError && e.error.error.message.includes("tool_choice.name"));
}

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
  await assert.rejects(client.messages.create({ ...ask, messages: [{ role: "user", content: [
      { type: "image", source: { type: "base64", media_type: "image/png", data: "AA==" } }] }] }),
    (e) => e instanceof Anthropic.BadRequestError &&
           e.error.error.message.includes("'messages[0].content[0].type'"));
  const wrong = new Anthropic({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(wrong.messages.create(ask),
    (e) => e instanceof Anthropic.AuthenticationError && e.status === 401 &&
           e.error.error.type === "authentication_error");
  await toolUse();
  console.log("anthropic client: PASS (" + JSON.stringify(text) + ")");
}

main().catch((e) => { console.error("FAIL:", e); process.exit(1); });
