// Structured output through the official OpenAI Node SDK against two running tokenhost servers of
// stories260K, one plain (A) and one speculating with spec_decode.ngram (B): random JSON Schemas of the
// documented subset, greedy and sampled, each answer that ends by the constraint's own completion
// (finish_reason "stop") parsed and validated by ajv with its members in the schema's order; the same
// greedy answers from B (speculation stays lossless under a constraint); 16 concurrent streams equal to
// their whole answers; json_object; a tokenhost.grammar; and the errors.
// Usage: node structured_test.mjs BASE_URL_A BASE_URL_B SEED
import assert from "node:assert/strict";
import OpenAI from "openai";
import Ajv from "ajv";
import addFormats from "ajv-formats";

const [urlA, urlB, seedArg] = process.argv.slice(2);
const a = new OpenAI({ baseURL: urlA, apiKey: "unused", maxRetries: 0 });
const b = new OpenAI({ baseURL: urlB, apiKey: "unused", maxRetries: 0 });
const model = (await a.models.list()).data[0].id;
const ajv = new Ajv({ strict: false });
addFormats(ajv);

// A small seeded generator (mulberry32): the run is reproducible from the seed printed by the script.
let state = Number(seedArg) >>> 0;
function random() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (n) => Math.floor(random() * n);

// Schemas of OpenAI's strict subset; strings bounded so that a tiny model ends them.
function randomSchema(depth = 0) {
  switch (pick(depth >= 2 ? 6 : 8)) {
    case 0: return { type: "string", maxLength: 1 + pick(12) };
    case 1: return { type: "integer" };
    case 2: return { type: "boolean" };
    case 3: return { enum: ["red", "green", "blue", 3, null].slice(0, 2 + pick(4)) };
    case 4: return { type: "string", format: ["date", "time", "uuid", "email", "date-time"][pick(5)] };
    case 5: return { type: ["integer", "null"] };
    case 6: return { type: "array", items: randomSchema(depth + 1), minItems: pick(2), maxItems: 2 + pick(2) };
    default: {
      const properties = {};
      const required = [];
      for (let i = 1 + pick(3); i > 0; i--) {
        const name = "abcdefgh"[pick(8)] + i;
        properties[name] = randomSchema(depth + 1);
        if (pick(3) > 0) required.push(name);
      }
      return { type: "object", properties, required, additionalProperties: false };
    }
  }
}
function randomObjectSchema() {
  const properties = {};
  const names = [];
  for (let i = 1 + pick(4); i > 0; i--) {
    const name = ["name", "age", "city", "mood", "pets", "when", "id", "zeta", "alpha"][pick(9)] + i;
    properties[name] = randomSchema(1);
    names.push(name);
  }
  return { type: "object", properties, required: names.filter(() => pick(4) > 0), additionalProperties: false };
}

// Every object's members in the order its schema lists them.
function inSchemaOrder(schema, value) {
  if (value === null || typeof value !== "object") return true;
  if (Array.isArray(value)) return value.every((v) => inSchemaOrder(schema.items ?? {}, v));
  const order = Object.keys(schema.properties ?? {});
  const keys = Object.keys(value);
  const positions = keys.map((k) => order.indexOf(k));
  return positions.every((p, i) => p >= 0 && (i === 0 || p > positions[i - 1])) &&
    keys.every((k) => inSchemaOrder(schema.properties[k], value[k]));
}

const messages = [{ role: "user", content: "Once upon a time, a JSON record:" }];
function ask(client, schema, extra = {}) {
  return client.chat.completions.create({
    model, messages, max_tokens: 400, temperature: 0,
    response_format: { type: "json_schema", json_schema: { name: "record", schema, strict: true } }, ...extra,
  });
}

let stopped = 0;
let total = 0;
const cut = [];  // greedy answers cut by max_tokens: [schema, text]
function check(schema, answer, what, greedy = false) {
  const choice = answer.choices[0];
  total++;
  if (choice.finish_reason !== "stop") {
    assert.equal(choice.finish_reason, "length", `${what}: finish_reason ${choice.finish_reason}`);
    if (greedy) cut.push([schema, choice.message.content, what]);
    return;
  }
  stopped++;
  let value;
  try {
    value = JSON.parse(choice.message.content);
  } catch (e) {
    assert.fail(`${what}: not JSON: ${JSON.stringify(choice.message.content)} (${e.message})`);
  }
  assert.ok(ajv.validate(schema, value), `${what}: ${JSON.stringify(choice.message.content)} does not validate against ` +
    `${JSON.stringify(schema)}: ${ajv.errorsText()}`);
  assert.ok(inSchemaOrder(schema, value), `${what}: members out of the schema's order: ${choice.message.content}`);
}

// Greedy and sampled, on A; the greedy ones on B too (speculating): the same text.
const schemas = Array.from({ length: 12 }, randomObjectSchema);
const greedy = [];
for (const [i, schema] of schemas.entries()) {
  const answer = await ask(a, schema);
  check(schema, answer, `schema ${i} greedy`, true);
  greedy.push(answer.choices[0].message.content);
  const sampled = await ask(a, schema, { temperature: 1, seed: 1000 + i });
  check(schema, sampled, `schema ${i} sampled`);
  const spec = await ask(b, schema);
  assert.equal(spec.choices[0].message.content, greedy[i], `schema ${i}: the speculating server answered otherwise`);
  const specSampled = await ask(b, schema, { temperature: 1, seed: 1000 + i });
  check(schema, specSampled, `schema ${i} sampled, speculating`);
}
console.log(`ok: ${total} answers to ${schemas.length} random schemas, ${stopped} ended by the constraint: each parses, ` +
  `validates (ajv) and keeps the schema's order; greedy answers equal with speculation`);
assert.ok(stopped >= total / 2, `only ${stopped} of ${total} answers ended by the constraint`);

// An answer cut by max_tokens is a prefix of a valid document: given room, the same greedy answer goes
// on from it to one that validates.
let extended = 0;
for (const [schema, text, what] of cut) {
  const longer = await ask(a, schema, { max_tokens: 1900 });
  const c = longer.choices[0];
  assert.ok(c.message.content.startsWith(text), `${what}: the longer answer does not continue the cut one`);
  if (c.finish_reason !== "stop") continue;
  check(schema, longer, `${what}, given room`);
  extended++;
}
// (A greedy answer that repeats itself inside an integer or a string never ends: those are only checked
// to continue their cut text.)
console.log(`ok: ${cut.length} greedy answers cut by max_tokens each continue with room, ${extended} of them to a valid document`);

// 16 concurrent streams, each equal to its whole greedy answer.
const streams = await Promise.all(schemas.concat(schemas.slice(0, 4)).map(async (schema, i) => {
  const s = await ask(a, schema, { stream: true });
  let text = "";
  let finish = null;
  for await (const chunk of s) {
    for (const c of chunk.choices) {
      text += c.delta?.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { i: i % schemas.length, text, finish };
}));
for (const { i, text, finish } of streams) {
  assert.equal(text, greedy[i], `stream of schema ${i} differs from its whole answer`);
  assert.ok(finish === "stop" || finish === "length");
}
console.log("ok: 16 concurrent streams equal their whole answers");

// Any JSON object.
for (const temperature of [0, 1]) {
  const r = await a.chat.completions.create({ model, messages, max_tokens: 300, temperature, seed: 7,
    response_format: { type: "json_object" } });
  if (r.choices[0].finish_reason === "stop") {
    const v = JSON.parse(r.choices[0].message.content);
    assert.ok(v !== null && typeof v === "object" && !Array.isArray(v), r.choices[0].message.content);
  }
}
console.log("ok: json_object");

// A grammar (the tokenhost extension), on completions too.
const g = await a.completions.create({ model, prompt: "The answer is", max_tokens: 20, temperature: 1, seed: 3,
  tokenhost: { grammar: 'root ::= ("yes" | "no") "!"' } });
assert.ok(["yes!", "no!"].includes(g.choices[0].text.trim()), JSON.stringify(g.choices[0].text));
assert.equal(g.choices[0].finish_reason, "stop");
console.log(`ok: tokenhost.grammar gives ${JSON.stringify(g.choices[0].text)}`);

// Errors: a schema outside the subset names its path, a grammar its line and column, both 400.
await assert.rejects(ask(a, { type: "object", properties: { a: { type: "string", pattern: "^x" } } }), (e) => {
  assert.equal(e.status, 400);
  assert.match(e.message, /pattern/);
  assert.match(e.param ?? e.error?.param ?? "", /response_format\.json_schema\.schema\/properties\/a/);
  return true;
});
await assert.rejects(a.completions.create({ model, prompt: "x", max_tokens: 4, tokenhost: { grammar: 'root ::= "a"\nb ::= (' } }),
  (e) => {
    assert.equal(e.status, 400);
    assert.match(e.message, /grammar:2:/);
    return true;
  });
// A grammar no text can continue: after "a" nothing matches. The request fails, naming the constraint.
await assert.rejects(a.completions.create({ model, prompt: "x", max_tokens: 8,
  tokenhost: { grammar: 'root ::= "a" [^\\x00-\\U0010FFFF]' } }), (e) => {
  assert.ok(e.status >= 400, `status ${e.status}`);
  assert.match(e.message, /constraint allows no token/);
  return true;
});
console.log("ok: a bad schema, a bad grammar and an impossible one are refused by name");
