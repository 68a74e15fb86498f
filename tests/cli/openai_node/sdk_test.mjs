// The official OpenAI Node SDK against a running tokenhost: completions and chat, whole and streamed,
// and the SDK's error classes on bad requests. Usage: node sdk_test.mjs BASE_URL (".../v1").
import assert from "node:assert/strict";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2], apiKey: "unused", maxRetries: 0 });

const models = await client.models.list();
assert.equal(models.data.length, 1);
const model = models.data[0].id;

// Completions, whole and streamed: the same greedy text, with usage.
const whole = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 24, temperature: 0 });
assert.equal(whole.object, "text_completion");
assert.equal(whole.choices.length, 1);
assert.ok(whole.choices[0].text.length > 0);
assert.ok(["length", "stop"].includes(whole.choices[0].finish_reason));
assert.equal(whole.usage.completion_tokens > 0, true);

let streamed = "";
let finish = null;
let usage = null;
const stream = await client.completions.create({
  model, prompt: "Once upon a time", max_tokens: 24, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    streamed += c.text;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
assert.equal(streamed, whole.choices[0].text);
assert.equal(finish, whole.choices[0].finish_reason);
assert.deepEqual(usage, whole.usage);

// Chat, whole and streamed.
const messages = [{ role: "system", content: "You tell stories." }, { role: "user", content: "A story about a dog." }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, logprobs: true, top_logprobs: 2 });
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices[0].message.role, "assistant");
assert.equal(chat.choices[0].logprobs.content.length, chat.usage.completion_tokens);
assert.equal(chat.choices[0].logprobs.content[0].top_logprobs.length, 2);

let chatStreamed = "";
let role = null;
const chatStream = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, stream: true });
for await (const chunk of chatStream) {
  const delta = chunk.choices[0]?.delta ?? {};
  if (delta.role) role = delta.role;
  if (delta.content) chatStreamed += delta.content;
}
assert.equal(role, "assistant");
assert.equal(chatStreamed, chat.choices[0].message.content);

// The SDK's own helper that gathers a stream.
const runner = client.beta.chat.completions.stream({ model, messages, max_tokens: 12, temperature: 0 });
const final = await runner.finalChatCompletion();
assert.equal(final.choices[0].message.role, "assistant");

// Errors: the SDK raises its typed errors with our status, message and param.
await assert.rejects(
  client.completions.create({ model, prompt: "hi", max_tokens: -3 }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "max_tokens" && /max_tokens/.test(e.message),
);
await assert.rejects(
  client.chat.completions.create({ model, messages: [{ role: "user" }], max_tokens: 4 }),
  (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /content/.test(e.message),
);
await assert.rejects(
  client.completions.create({ model: "no-such-model", prompt: "hi", max_tokens: 4 }),
  (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && /no-such-model/.test(e.message),
);
// A streamed request refused before it starts is an error, not an empty stream.
await assert.rejects(
  client.completions.create({ model, prompt: "hi", temperature: 9, stream: true }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "temperature",
);
console.log("openai SDK: all checks passed");
