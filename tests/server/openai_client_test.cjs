// The official `openai` npm client against `kvcache serve`: models, a streamed chat completion
// (role first, content deltas, one finish_reason, the usage chunk), the same answer unstreamed,
// a text completion with usage, logprobs (chat, streamed chat, completions), a json_schema response_format (n = 2, each answer parsed and
// checked), and the client's typed errors for 400 (max_tokens, an unsupported schema keyword,
// tool_choice) and 401. On TOOLS_URL (a random llama served with ChatML: its text is noise):
// tools with tool_choice required, named and auto, and streamed tool calls (the client's
// accumulated deltas), each call's arguments validated by ajv against the tool's parameters.
// Usage: node openai_client_test.cjs NPM_DIR BASE_URL API_KEY TOOLS_URL
"use strict";
const { createRequire } = require("node:module");
const assert = require("node:assert/strict");
const [npmDir, baseURL, apiKey, toolsURL] = process.argv.slice(2);
const requireNpm = createRequire(npmDir + "/package.json");
const { OpenAI } = requireNpm("openai");
const Ajv = requireNpm("ajv");

const weather = { type: "object", additionalProperties: false, required: ["city", "days"],
                  properties: { city: { enum: ["Oslo", "Rome"] },
                                days: { type: "integer", minimum: 1, maximum: 7 } } };
const note = { type: "object", additionalProperties: false, required: ["text"],
               properties: { text: { type: "string", maxLength: 10 } } };
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather", parameters: weather } },
  { type: "function", function: { name: "note", parameters: note } },
];

// Each call names a tool and its arguments validate (ajv); returns the names.
function checkCalls(calls, validators) {
  assert.ok(calls && calls.length >= 1);
  return calls.map((c) => {
    assert.equal(c.type, "function");
    assert.ok(c.id.startsWith("call_"));
    const validate = validators[c.function.name];
    assert.ok(validate, c.function.name);
    assert.ok(validate(JSON.parse(c.function.arguments)), JSON.stringify(validate.errors));
    return c.function.name;
  });
}

async function toolCalls() {
  const ajv = new Ajv();
  const validators = { get_weather: ajv.compile(weather), note: ajv.compile(note) };
  const client = new OpenAI({ baseURL: toolsURL + "/v1", apiKey, maxRetries: 0, timeout: 30000 });
  const messages = [{ role: "user", content: "Weather in Rome?" }];
  const required = await client.chat.completions.create({
    model: "tools", messages, tools, tool_choice: "required", parallel_tool_calls: false,
    n: 2, temperature: 1.0, seed: 3, max_tokens: 100 });
  for (const c of required.choices) {
    assert.equal(c.finish_reason, "tool_calls");
    assert.equal(c.message.content, null);
    checkCalls(c.message.tool_calls, validators);
  }
  const named = await client.chat.completions.create({
    model: "tools", messages, tools, max_tokens: 100,
    tool_choice: { type: "function", function: { name: "note" } } });
  assert.deepEqual(checkCalls(named.choices[0].message.tool_calls, validators), ["note"]);
  const auto = await client.chat.completions.create({ model: "tools", messages, tools,
                                                      tool_choice: "auto", max_tokens: 16 });
  const m = auto.choices[0].message;
  if (m.tool_calls && m.tool_calls.length) checkCalls(m.tool_calls, validators);
  else assert.equal(typeof m.content, "string");
  // Streamed: the client's own accumulation of delta.tool_calls.
  const stream = client.beta.chat.completions.stream({
    model: "tools", messages, tools, tool_choice: "required", parallel_tool_calls: false,
    max_tokens: 100 });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  checkCalls(final.choices[0].message.tool_calls, validators);
  // The call goes back into the conversation with its result.
  const call = final.choices[0].message.tool_calls[0];
  const next = await client.chat.completions.create({ model: "tools", max_tokens: 4, tools,
    tool_choice: "none", messages: [...messages, { role: "assistant", content: null, tool_calls: [call] },
                                    { role: "tool", tool_call_id: call.id, content: "sunny" }] });
  assert.equal(typeof next.choices[0].message.content, "string");
}

async function main() {
  const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey, maxRetries: 0, timeout: 30000 });
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ["tiny"]);

  const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello there" }];
  const stream = await client.chat.completions.create({
    model: "tiny", messages, max_tokens: 16, stream: true, stream_options: { include_usage: true },
  });
  let text = "", finishes = [], usage = null, first = true;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    const c = chunk.choices[0];
    if (first) assert.equal(c.delta.role, "assistant");
    first = false;
    text += c.delta.content || "";
    if (c.finish_reason) finishes.push(c.finish_reason);
  }
  assert.equal(finishes.length, 1);
  assert.ok(["stop", "length"].includes(finishes[0]));
  assert.ok(usage && usage.completion_tokens >= 1 && usage.completion_tokens <= 16);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);

  const whole = await client.chat.completions.create({ model: "tiny", messages, max_tokens: 16 });
  assert.equal(whole.choices[0].message.content, text);  // greedy: the same answer
  assert.equal(whole.usage.prompt_tokens, usage.prompt_tokens);
  assert.ok(whole.usage.prompt_tokens_details.cached_tokens > 0);  // the prefix was cached

  const done = await client.completions.create({ model: "tiny", prompt: "And God said", max_tokens: 8 });
  assert.equal(done.object, "text_completion");
  assert.equal(done.usage.prompt_tokens, 12);
  assert.ok(done.usage.completion_tokens >= 1 && done.usage.completion_tokens <= 8);

  // logprobs: one entry per generated token, the drawn one greedy = the first alternative,
  // alternatives in order, their bytes joined = the answer; streamed the same.
  const lp = await client.chat.completions.create({
    model: "tiny", messages, max_tokens: 8, logprobs: true, top_logprobs: 3 });
  const content = lp.choices[0].logprobs.content;
  assert.equal(content.length, lp.usage.completion_tokens);
  let joined = [];
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.token, e.top_logprobs[0].token);
    assert.equal(e.logprob, e.top_logprobs[0].logprob);
    assert.ok(e.logprob <= 0 && e.top_logprobs[1].logprob <= e.logprob &&
              e.top_logprobs[2].logprob <= e.top_logprobs[1].logprob);
    joined = joined.concat(e.bytes);
  }
  assert.ok(Buffer.from(joined).toString("utf8").startsWith(lp.choices[0].message.content));
  const lpStream = await client.chat.completions.create({
    model: "tiny", messages, max_tokens: 8, logprobs: true, top_logprobs: 3, stream: true });
  const streamed = [];
  for await (const chunk of lpStream)
    for (const c of chunk.choices) if (c.logprobs) streamed.push(...c.logprobs.content);
  // The same tokens; values within float noise (a prefix-cache hit computes them anew).
  assert.deepEqual(streamed.map((e) => e.token), content.map((e) => e.token));
  streamed.forEach((e, i) => assert.ok(Math.abs(e.logprob - content[i].logprob) < 1e-3));
  const legacy = await client.completions.create({
    model: "tiny", prompt: "And God said", max_tokens: 4, logprobs: 2 });
  const l = legacy.choices[0].logprobs;
  assert.equal(l.tokens.length, legacy.usage.completion_tokens);
  assert.equal(l.token_logprobs.length, l.tokens.length);
  assert.deepEqual(l.text_offset.slice(0, 2), [0, Buffer.byteLength(l.tokens[0])]);
  assert.ok(l.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2));

  await assert.rejects(
    client.chat.completions.create({ model: "tiny", messages, max_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "max_tokens");
  // Structured output: a json_schema answer parses and fits; an unenforceable keyword is a 400.
  const schema = {
    type: "object", additionalProperties: false, required: ["color", "count"],
    properties: { color: { enum: ["red", "green", "blue"] },
                  count: { type: "integer", minimum: 1, maximum: 20 } },
  };
  const shaped = await client.chat.completions.create({
    model: "tiny", messages, max_tokens: 64, temperature: 0.9, seed: 4, n: 2,
    response_format: { type: "json_schema", json_schema: { name: "pick", strict: true, schema } },
  });
  for (const c of shaped.choices) {
    assert.equal(c.finish_reason, "stop");
    const v = JSON.parse(c.message.content);
    assert.deepEqual(Object.keys(v), ["color", "count"]);
    assert.ok(["red", "green", "blue"].includes(v.color));
    assert.ok(Number.isInteger(v.count) && v.count >= 1 && v.count <= 20);
  }
  await assert.rejects(
    client.chat.completions.create({ model: "tiny", messages, response_format: {
      type: "json_schema", json_schema: { name: "t", schema: { type: "array", uniqueItems: true } } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 &&
           e.message.includes("unsupported JSON Schema keyword 'uniqueItems' at the root"));
  await assert.rejects(
    client.chat.completions.create({ model: "tiny", messages, tools: [], tool_choice: 5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice");
  await toolCalls();
  const wrong = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(wrong.models.list(),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  console.log("openai client: PASS (" + JSON.stringify(text) + ")");
}

main().catch((e) => { console.error("FAIL:", e); process.exit(1); });
