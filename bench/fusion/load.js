// Loads for the multi-model benchmarks (bench/fusion/run.sh), against a running gateway.
//   node load.js pass GATEWAY_PORT MODEL OUT.json [CONCURRENCY] [MAX_TOKENS]
//     every prompt of prompts() once, greedy, answered whole: per prompt its text, the model that
//     answered, its cost (tokenhost.choices[0].cost; 0 outside a group), milliseconds.
//   node load.js zipf GATEWAY_PORT MODEL OUT.json REQUESTS DISTINCT S SEED [CONCURRENCY] [MAX_TOKENS]
//     REQUESTS greedy streamed requests whose prompts are drawn from DISTINCT prompts with Zipf
//     exponent S (prompt k with weight 1/k^S, a seeded draw): per request its prompt, whether the
//     cache answered it (tokenhost.cached in its last chunk), its TTFT and total milliseconds.
const http = require("http");
const fs = require("fs");

const names = ["Lily", "Tom", "Sue", "Ben", "Mia", "Max", "Anna", "Sam"];
const openings = ["Once upon a time, {} wanted", "{} went to the park and saw", "One day, {} found a", "{} was sad because",
                  "{} and her mom baked", "The dog ran to {} and", "{} liked to play with"];
function prompts() {
  const out = [];
  for (const o of openings) for (const n of names) out.push(o.replace("{}", n));
  return out;  // 56 prompts
}

function post(port, body, onChunk) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request({ host: "127.0.0.1", port, path: "/v1/completions", method: "POST",
                               headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) } }, (res) => {
      let text = "";
      res.on("data", (d) => { text += d; if (onChunk) onChunk(); });
      res.on("end", () => resolve({ status: res.statusCode, text }));
    });
    req.on("error", reject);
    req.end(data);
  });
}

async function pool(n, concurrency, work) {
  let next = 0;
  const workers = Array.from({ length: concurrency }, async () => { while (next < n) await work(next++); });
  await Promise.all(workers);
}

async function pass(port, model, out, concurrency, maxTokens) {
  const ps = prompts(), results = new Array(ps.length);
  const t0 = performance.now();
  await pool(ps.length, concurrency, async (i) => {
    const start = performance.now();
    const r = await post(port, { model, prompt: ps[i], max_tokens: maxTokens, temperature: 0 });
    const j = JSON.parse(r.text);
    if (r.status !== 200) throw new Error(`prompt ${i}: ${r.status} ${r.text}`);
    const route = j.tokenhost ? j.tokenhost.choices[0] : null;
    results[i] = { prompt: ps[i], text: j.choices[0].text, model: j.model, cost: route ? route.cost : 0,
                   path: route ? route.path.map((h) => h.model + ":" + h.outcome) : [],
                   first_signal: route && route.path.length ? route.path[0].mean_logprob : null, ms: performance.now() - start };
  });
  fs.writeFileSync(out, JSON.stringify({ wall_ms: performance.now() - t0, results }));
}

function rng(seed) {  // mulberry32
  return () => { seed |= 0; seed = (seed + 0x6d2b79f5) | 0; let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
                 t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t; return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
}

async function zipf(port, model, out, requests, distinct, s, seed, concurrency, maxTokens) {
  const ps = prompts().concat(prompts().map((p) => p + " a big")).slice(0, distinct);
  const weights = ps.map((_, k) => 1 / Math.pow(k + 1, s)), total = weights.reduce((a, b) => a + b, 0);
  const draw = rng(seed), picks = [];
  for (let i = 0; i < requests; ++i) {
    let u = draw() * total, k = 0;
    while (k < ps.length - 1 && u >= weights[k]) u -= weights[k++];
    picks.push(k);
  }
  const results = new Array(requests);
  const t0 = performance.now();
  await pool(requests, concurrency, async (i) => {
    const start = performance.now();
    let first = -1;
    const r = await post(port, { model, prompt: ps[picks[i]], max_tokens: maxTokens, temperature: 0, stream: true }, () => {
      if (first < 0) first = performance.now() - start;
    });
    if (r.status !== 200) throw new Error(`request ${i}: ${r.status} ${r.text}`);
    const events = r.text.split("\n").filter((l) => l.startsWith("data: {")).map((l) => JSON.parse(l.slice(6)));
    const firstText = events.findIndex((e) => e.choices && e.choices[0].text);
    const last = events.filter((e) => e.tokenhost).pop();
    results[i] = { prompt: picks[i], cached: !!(last && last.tokenhost.cached), ttft_ms: first, ms: performance.now() - start,
                   text: events.map((e) => (e.choices ? e.choices[0].text : "")).join(""), has_text: firstText >= 0 };
  });
  fs.writeFileSync(out, JSON.stringify({ wall_ms: performance.now() - t0, results }));
}

const [mode, port, model, out, ...rest] = process.argv.slice(2);
const main = mode === "pass" ? pass(+port, model, out, +(rest[0] || 4), +(rest[1] || 48))
                             : zipf(+port, model, out, +rest[0], +rest[1], +rest[2], +rest[3], +(rest[4] || 4), +(rest[5] || 48));
main.catch((e) => { console.error(e.message); process.exit(1); });
