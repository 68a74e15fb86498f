// Greedy completions for the real-proposer benchmark (proposers.sh), one process per run.
//   node greedy_client.js URL MODEL PROMPTS.json CONCURRENCY MAX_TOKENS          -> tokens/s on stdout
//   node greedy_client.js URL MODEL PROMPTS.json 1 MAX_TOKENS --copy OUT.json    -> prompt-copying prompts
// The first form sends every prompt (temperature 0, ignore_eos) with CONCURRENCY in flight and prints
// the completion tokens over the wall time. The second writes, for each prompt P whose greedy
// continuation is C, the prompt P + C + "\n" + P: a model that continues it the way it did the first
// time copies C from its own prompt (what prompt-lookup and suffix proposers find).
const [url, model, promptsFile, concurrency, maxTokens, mode, outFile] = process.argv.slice(2);
const prompts = JSON.parse(require("fs").readFileSync(promptsFile, "utf8"));

async function complete(prompt) {
  const r = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model, prompt, max_tokens: Number(maxTokens), temperature: 0, ignore_eos: true }),
  });
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const j = await r.json();
  return { text: j.choices[0].text, tokens: j.usage.completion_tokens };
}

(async () => {
  if (mode === "--copy") {
    const out = [];
    for (const p of prompts) out.push(p + (await complete(p)).text + "\n" + p);
    require("fs").writeFileSync(outFile, JSON.stringify(out));
    return;
  }
  let next = 0, tokens = 0;
  const started = process.hrtime.bigint();
  const worker = async () => {
    while (next < prompts.length) tokens += (await complete(prompts[next++])).tokens;
  };
  await Promise.all(Array.from({ length: Number(concurrency) }, worker));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  console.log((tokens / seconds).toFixed(2));
})().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
