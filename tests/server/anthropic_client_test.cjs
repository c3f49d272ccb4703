// The official `@anthropic-ai/sdk` npm client against `kvcache serve`: a message (text block,
// stop reason, usage), the same request streamed (the event sequence message_start,
// content_block_start, deltas, content_block_stop, message_delta, message_stop, and the same
// text at temperature 0), stop_sequences, count_tokens, and the client's typed errors for 400
// (missing max_tokens, an image block) and 401 (x-api-key); then, on a server with a longer
// context (TOOLS_URL), tool use: a forced tool, whole and streamed (tool_use blocks whose input
// ajv validates against the tool's input_schema), and the call's tool_result sent back; then,
// on the same model with the harmony template (HARMONY_URL), thinking: enabled and disabled
// read (the effort they ask for shows in count_tokens), an assistant's thinking blocks sent
// back (rendered before its call), the answer's blocks whole and streamed (a random model
// writes no analysis channel, so a thinking block is checked only for its shape when one comes;
// tests/server/anthropic_api_test.cpp pins the blocks of a harmony reply), and the 400s naming
// thinking's fields; the ChatML server accepts thinking and answers without a thinking block.
// Usage: node anthropic_client_test.cjs NPM_DIR BASE_URL API_KEY TOOLS_URL HARMONY_URL
"use strict";
const { createRequire } = require("node:module");
const assert = require("node:assert/strict");
const [npmDir, baseURL, apiKey, toolsURL, harmonyURL] = process.argv.slice(2);
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

// A message's blocks: thinking blocks (a string and a signature) first, then text or tool use.
function checkBlocks(content) {
  const types = content.map((b) => b.type);
  const firstOther = types.findIndex((t) => t !== "thinking");
  const rest = types.slice(firstOther);
  assert.ok(firstOther >= 0 && rest.every((t) => t === "text" || t === "tool_use"),
            JSON.stringify(types));
  for (const b of content.filter((x) => x.type === "thinking")) {
    assert.equal(typeof b.thinking, "string");
    assert.match(b.signature, /^kvcache-[0-9]+-[0-9a-f]{16}$/);
  }
}

async function thinking() {
  const client = new Anthropic({ baseURL: harmonyURL, apiKey, maxRetries: 0, timeout: 30000 });
  const messages = [{ role: "user", content: "Weather in Rome?" }];
  const count = async (extra) =>
    (await client.messages.countTokens({ model: "gpt-oss", messages, ...extra })).input_tokens;
  // low (budget below 4096, or disabled) states "Reasoning: low", medium and high 3 bytes more
  // (raw-byte vocabulary).
  const low = await count({ thinking: { type: "enabled", budget_tokens: 1024 } });
  assert.equal(await count({ thinking: { type: "disabled" } }), low);
  assert.equal(await count({ thinking: { type: "enabled", budget_tokens: 4096 } }), low + 3);
  assert.equal(await count({ thinking: { type: "enabled", budget_tokens: 16384 } }), low + 1);
  assert.equal(await count({}), low + 3);  // the template's default: medium
  // An assistant's thinking block is its reasoning: harmony renders it before the call.
  const call = { type: "tool_use", id: "toolu_1", name: "get_weather",
                 input: { city: "Rome", days: 1 } };
  const result = { type: "tool_result", tool_use_id: "toolu_1", content: "Sunny" };
  const history = (blocks) => ({ model: "gpt-oss", tools, messages: [
    messages[0], { role: "assistant", content: blocks }, { role: "user", content: [result] }] });
  const thought = "The user wants Rome's weather.";
  const bare = (await client.messages.countTokens(history([call]))).input_tokens;
  const withThought = (await client.messages.countTokens(history([
    { type: "thinking", thinking: thought, signature: "from-elsewhere" },
    { type: "redacted_thinking", data: "opaque" }, call]))).input_tokens;
  assert.ok(withThought > bare + thought.length, `${withThought} vs ${bare}`);

  const ask = { model: "gpt-oss", max_tokens: 1100, temperature: 0, messages,
                thinking: { type: "enabled", budget_tokens: 1024 } };
  const msg = await client.messages.create(ask);
  assert.equal(msg.type, "message");
  checkBlocks(msg.content);
  // Streamed: the same blocks (temperature 0), each started, stopped, and indexed in order.
  const stream = client.messages.stream(ask);
  const starts = [];
  stream.on("streamEvent", (ev) => {
    if (ev.type === "content_block_start") starts.push(ev.index);
  });
  const streamed = await stream.finalMessage();
  checkBlocks(streamed.content);
  assert.deepEqual(starts, streamed.content.map((_, i) => i));
  assert.deepEqual(streamed.content.map((b) => b.type), msg.content.map((b) => b.type));
  assert.deepEqual(streamed.content.map((b) => b.text ?? b.thinking),
                   msg.content.map((b) => b.text ?? b.thinking));
  // Refusals name the field.
  const refused = (thinkingField, maxTokens, field) => assert.rejects(
    client.messages.create({ ...ask, max_tokens: maxTokens, thinking: thinkingField }),
    (e) => e instanceof Anthropic.BadRequestError &&
           e.error.error.type === "invalid_request_error" &&
           e.error.error.message.includes(`'${field}'`));
  await refused({ type: "enabled", budget_tokens: 1024 }, 1024, "thinking.budget_tokens");
  await refused({ type: "enabled", budget_tokens: 1000 }, 1100, "thinking.budget_tokens");
  await refused({ type: "enabled" }, 1100, "thinking.budget_tokens");
  await refused({ type: "adaptive" }, 1100, "thinking.type");
  // A template without reasoning: accepted, no thinking block.
  const chatml = new Anthropic({ baseURL: toolsURL, apiKey, maxRetries: 0, timeout: 30000 });
  const plain = await chatml.messages.create({ ...ask, model: "tools", max_tokens: 1030 });
  assert.ok(plain.content.every((b) => b.type !== "thinking"), JSON.stringify(plain.content));
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
  await thinking();
  console.log("anthropic client: PASS (" + JSON.stringify(text) + ")");
}

main().catch((e) => { console.error("FAIL:", e); process.exit(1); });
