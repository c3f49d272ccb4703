// The official `openai` npm client against `kvcache serve`: models, a streamed chat completion
// (role first, content deltas, one finish_reason, the usage chunk), the same answer unstreamed,
// a text completion with usage, logprobs (chat, streamed chat, completions), a json_schema response_format (n = 2, each answer parsed and
// checked), and the client's typed errors for 400 (max_tokens, an unsupported schema keyword,
// tools) and 401.
// Usage: node openai_client_test.cjs NPM_DIR BASE_URL API_KEY
"use strict";
const { createRequire } = require("node:module");
const assert = require("node:assert/strict");
const [npmDir, baseURL, apiKey] = process.argv.slice(2);
const requireNpm = createRequire(npmDir + "/package.json");
const { OpenAI } = requireNpm("openai");

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
    client.chat.completions.create({ model: "tiny", messages, tools: [{ type: "function",
      function: { name: "f", parameters: { type: "object" } } }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "tools");
  const wrong = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(wrong.models.list(),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  console.log("openai client: PASS (" + JSON.stringify(text) + ")");
}

main().catch((e) => { console.error("FAIL:", e); process.exit(1); });
