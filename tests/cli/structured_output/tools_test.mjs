// Tool calling through the official OpenAI Node SDK against a tokenhost server of two copies of
// stories260K carrying chat templates with tool formats: "llama31" (Llama 3.1's JSON calls) and "qwen"
// (Hermes' <tool_call> tags, as Qwen2.5's). Calls required or named come back as tool_calls whose
// arguments validate (ajv) against their function's parameters, whole and streamed; the next turn
// (the call and its result in the history) is rendered and answered; a template without a tool format
// and a bad tool_choice are refused. Usage: node tools_test.mjs BASE_URL SEED
import assert from "node:assert/strict";
import OpenAI from "openai";
import Ajv from "ajv";

const [url, seedArg] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url, apiKey: "unused", maxRetries: 0 });
const ajv = new Ajv({ strict: false });
let seed = Number(seedArg);

const tools = [
  { type: "function", function: { name: "get_weather", description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer" } },
      required: ["city", "days"], additionalProperties: false } } },
  { type: "function", function: { name: "add", description: "Adds two numbers",
    parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } }, required: ["a", "b"],
      additionalProperties: false } } },
  { type: "function", function: { name: "set_mode",
    parameters: { type: "object", properties: { mode: { enum: ["fast", "slow"] } }, required: ["mode"] } } },
];
const byName = Object.fromEntries(tools.map((t) => [t.function.name, t.function]));
const messages = [{ role: "user", content: "What is the weather in Paris?" }];

function checkCalls(calls, what, only) {
  assert.ok(Array.isArray(calls) && calls.length >= 1, `${what}: no tool_calls`);
  for (const call of calls) {
    assert.equal(call.type, "function");
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
    const f = byName[call.function.name];
    assert.ok(f, `${what}: unknown function ${call.function.name}`);
    if (only) assert.equal(call.function.name, only, what);
    const args = JSON.parse(call.function.arguments);
    assert.ok(ajv.validate(f.parameters, args), `${what}: ${call.function.arguments}: ${ajv.errorsText()}`);
  }
}

for (const model of ["llama31", "qwen"]) {
  for (const temperature of [0, 1]) {
    for (const tool_choice of ["required", { type: "function", function: { name: "add" } }]) {
      const what = `${model}, ${JSON.stringify(tool_choice)}, temperature ${temperature}`;
      const r = await client.chat.completions.create({ model, messages, tools, tool_choice, temperature, seed: seed++,
        max_tokens: 200, parallel_tool_calls: false });
      const c = r.choices[0];
      assert.equal(c.finish_reason, "tool_calls", `${what}: ${JSON.stringify(c)}`);
      assert.equal(c.message.content, null, what);
      checkCalls(c.message.tool_calls, what, typeof tool_choice === "object" ? "add" : null);

      // The same streamed: the calls arrive as a tool_calls delta, the finish says tool_calls.
      const s = await client.chat.completions.create({ model, messages, tools, tool_choice, temperature, seed: seed - 1,
        max_tokens: 200, parallel_tool_calls: false, stream: true });
      let streamed = [];
      let finish = null;
      let text = "";
      for await (const chunk of s) {
        for (const ch of chunk.choices) {
          if (ch.delta?.tool_calls) streamed = streamed.concat(ch.delta.tool_calls);
          text += ch.delta?.content ?? "";
          if (ch.finish_reason) finish = ch.finish_reason;
        }
      }
      assert.equal(finish, "tool_calls", what + " (stream)");
      assert.equal(text, "", what + " (stream)");
      assert.deepEqual(streamed.map((t) => [t.index, t.function.name, t.function.arguments]),
        c.message.tool_calls.map((t, i) => [i, t.function.name, t.function.arguments]), what + ": the stream's calls differ");

      // The next turn: the call and its result in the history.
      const call = c.message.tool_calls[0];
      const next = await client.chat.completions.create({ model, tools, temperature: 0, max_tokens: 8, messages: messages.concat([
        { role: "assistant", content: null, tool_calls: [call] },
        { role: "tool", tool_call_id: call.id, content: "{\"result\": 42}" }]) });
      assert.ok(["stop", "length", "tool_calls"].includes(next.choices[0].finish_reason));
    }
  }
  console.log(`ok: ${model}: required and named calls, greedy and sampled, whole and streamed, validate; the next turn renders`);
}

// Several calls in one answer (Hermes): every one validates.
const many = await client.chat.completions.create({ model: "qwen", messages, tools, tool_choice: "required", temperature: 0,
  max_tokens: 300 });
if (many.choices[0].finish_reason === "tool_calls") checkCalls(many.choices[0].message.tool_calls, "parallel calls");
console.log(`ok: parallel_tool_calls: ${many.choices[0].message.tool_calls?.length ?? 0} call(s), finish ${many.choices[0].finish_reason}`);

// auto: the model may answer in text; tool_choice none: no tools at all.
const auto = await client.chat.completions.create({ model: "qwen", messages, tools, temperature: 0, max_tokens: 16 });
assert.ok(["stop", "length", "tool_calls"].includes(auto.choices[0].finish_reason));
const none = await client.chat.completions.create({ model: "qwen", messages, tools, tool_choice: "none", temperature: 0, max_tokens: 16 });
assert.equal(none.choices[0].message.tool_calls, undefined);
console.log("ok: tool_choice auto and none");

await assert.rejects(client.chat.completions.create({ model: "plain", messages, tools, max_tokens: 4 }), (e) => {
  assert.equal(e.status, 400);
  assert.match(e.message, /no tool-call format/);
  return true;
});
await assert.rejects(client.chat.completions.create({ model: "qwen", messages, tools, max_tokens: 4,
  tool_choice: { type: "function", function: { name: "nope" } } }), (e) => {
  assert.equal(e.status, 400);
  assert.match(e.message, /does not list/);
  return true;
});
await assert.rejects(client.chat.completions.create({ model: "qwen", messages, max_tokens: 4, tool_choice: "required",
  tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { x: { type: "string", pattern: "a" } } } } }] }),
  (e) => {
    assert.equal(e.status, 400);
    assert.match(e.param ?? e.error?.param ?? "", /tools\[0\]\.function\.parameters/);
    return true;
  });
console.log("ok: no tool format, an unknown function and a schema outside the subset are refused by name");
