// Medians over the rounds of bench/serving/run.sh, as the markdown tables of bench/RESULTS.md.
// Usage: node bench/serving/summarize.mjs OUT_DIR
import fs from "node:fs";
import path from "node:path";

const dir = process.argv[2];
const runs = {};  // "continuous-c16" -> [report, ...]
for (const f of fs.readdirSync(dir)) {
  const m = f.match(/^r\d+-(.+)\.json$/);
  if (m) (runs[m[1]] ??= []).push(JSON.parse(fs.readFileSync(path.join(dir, f), "utf8")));
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const fig = (name, get) => (runs[name] ? median(runs[name].map(get)) : NaN);
const tput = (name) => fig(name, (r) => r.output_throughput);
const fmt = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "n/a");

console.log("| scheduler | streams | output tokens/s | TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) | rounds |");
console.log("|---|---|---|---|---|---|");
for (const c of [16, 64]) {
  for (const s of ["continuous", "static"]) {
    const n = `${s}-c${c}`;
    if (!runs[n]) continue;
    console.log(`| scheduler.${s} | ${c} | ${fmt(tput(n))} | ${fmt(fig(n, (r) => r.ttft_ms.p50), 0)} / ${fmt(fig(n, (r) => r.ttft_ms.p99), 0)}` +
                ` | ${fmt(fig(n, (r) => r.itl_ms.p50), 0)} / ${fmt(fig(n, (r) => r.itl_ms.p99), 0)} | ${runs[n].length} |`);
  }
  console.log(`| **continuous / static** | ${c} | **${fmt(tput(`continuous-c${c}`) / tput(`static-c${c}`), 2)}x** | | | |`);
}
console.log();
const one = tput("continuous-c1"), eight = tput("continuous-c8"), sixteen = tput("continuous-c16");
console.log(`single stream: ${fmt(one)} tokens/s; 8 streams: ${fmt(eight)}; 16 streams: ${fmt(sixteen)} ` +
            `(batching efficiency at 16: ${fmt(sixteen / one, 2)}x)`);
const itl1 = fig("continuous-c1", (r) => r.itl_ms.mean);
console.log(`single stream through HTTP: ITL mean ${fmt(itl1, 2)} ms = ${fmt(1000 / itl1)} tokens/s while decoding`);
