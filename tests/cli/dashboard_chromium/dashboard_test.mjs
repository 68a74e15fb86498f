// Drives /dashboard in headless Chromium against a running `tokenhost serve` with three engines (one of
// them MoE: its expert-load heat map) and checks that what the page shows agrees with the admin API: engines, their plugins and versions, the router,
// open libraries, retiring engines, experiments with their arms and request counts; that a plugin swap
// shows within a few seconds; that a wrong token and an unreachable server say so. Saves a screenshot.
// Environment: ADMIN_URL GATEWAY_URL ADMIN_TOKEN TOKENHOST FIXTURES CHROMIUM CHROMEDRIVER SCREENSHOT
// SERVER_PID PROFILE_DIR (see dashboard_chromium.sh).
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";

import { Browser, eventually, sleep } from "./webdriver.mjs";

const env = name => {
  if (!process.env[name]) throw new Error(`${name} is not set`);
  return process.env[name];
};
const ADMIN = env("ADMIN_URL"), GATEWAY = env("GATEWAY_URL"), TOKEN = env("ADMIN_TOKEN");
const SLOTS = ["attention", "kvcache", "scheduler", "moe", "spec_decode"];

let checks = 0;
const ok = what => { ++checks; console.log("ok: " + what); };

async function api(method, path, body) {
  const res = await fetch(ADMIN + path, {
    method,
    headers: { Authorization: "Bearer " + TOKEN, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json();
  return { status: res.status, json };
}
async function apiOk(method, path, body) {
  const r = await api(method, path, body);
  if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status}: ${JSON.stringify(r.json)}`);
  return r.json;
}

// Runs in the page: what it shows, as text and the data- attributes the markup carries.
function readPage() {
  const txt = e => (e ? e.innerText.replace(/\s+/g, " ").trim() : null);
  const slots = root => [...root.querySelectorAll("[data-plugin-slot]")].map(s => ({
    slot: s.dataset.pluginSlot, id: s.dataset.pluginId, version: s.dataset.pluginVersion, text: txt(s) }));
  const fields = root => Object.fromEntries([...root.querySelectorAll("[data-field]")].map(f => [f.dataset.field, txt(f)]));
  const engines = table => [...document.querySelectorAll(table + " tbody tr[data-engine]")].map(tr => ({
    name: tr.dataset.engine, fields: fields(tr), slots: slots(tr), stateTitle: tr.querySelector('[data-field="state"] .tag')?.title || null }));
  const r = document.querySelector("#router");
  return {
    conn: document.querySelector("#conn").dataset.state,
    auth: document.querySelector("#auth").hidden ? null : txt(document.querySelector("#auth-message")),
    problem: document.querySelector("#problem").hidden ? null : txt(document.querySelector("#problem-message")),
    hash: location.hash,
    router: { id: r.dataset.pluginId, version: r.dataset.pluginVersion, text: txt(r) },
    openLibraries: txt(document.querySelector("#open-libraries")),
    engines: engines("#engines"),
    retiringShown: !document.querySelector("#retiring-section").hidden,
    retiring: engines("#retiring-engines"),
    breakersPolicy: txt(document.querySelector("#breakers-policy")),
    overloadPolicy: txt(document.querySelector("#overload-policy")),
    breakers: [...document.querySelectorAll("#breakers tbody tr[data-breaker]")].map(tr => ({ engine: tr.dataset.breaker, fields: fields(tr) })),
    experimentsNote: txt(document.querySelector("#experiments-empty")),
    expertsShown: !document.querySelector("#experts-section").hidden,
    expertMaps: [...document.querySelectorAll("#expert-maps canvas[data-engine]")].map(c => ({
      engine: c.dataset.engine, maxImbalance: c.dataset.maxImbalance, rows: c.height })),
    experiments: [...document.querySelectorAll("#experiments [data-experiment]")].map(c => ({
      name: c.dataset.experiment, state: c.dataset.state,
      arms: [...c.querySelectorAll("tr[data-arm]")].map(tr => ({ name: tr.dataset.arm, fields: fields(tr) })),
      comparisons: [...c.querySelectorAll("[data-comparison]")].map(li => ({
        metric: li.dataset.comparison, baseline: li.dataset.baseline, candidate: li.dataset.candidate, text: txt(li) })),
    })),
  };
}

// Runs in the page: pixels of each colour in a canvas below its legend row (so: drawn lines).
function chartInk(selector, colors) {
  const c = document.querySelector(selector);
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  const top = Math.ceil(24 * (window.devicePixelRatio || 1));
  const rgb = colors.map(s => s.match(/\d+/g).map(Number));
  const counts = colors.map(() => 0);
  for (let y = top; y < c.height; ++y) {
    for (let x = 0; x < c.width; ++x) {
      const i = (y * c.width + x) * 4;
      rgb.forEach(([r, g, b], k) => {
        if (Math.abs(d[i] - r) + Math.abs(d[i + 1] - g) + Math.abs(d[i + 2] - b) < 30 && d[i + 3] > 200) ++counts[k];
      });
    }
  }
  return counts;
}
function swatchColors(selector) {
  return [...document.querySelectorAll(selector)].map(s => getComputedStyle(s).backgroundColor);
}

// Runs in the page: its windowed rate and mean (what the live charts plot) over given samples.
function pageWindowed(key, samples) {
  for (const x of samples) record(key, x.t, { c: x.c, s: x.s, n: x.n });
  return { rates: windowed(key, rate("c")), means: windowed(key, meanOf("s", "n")) };
}
// The same in plain loops: for each sample after the first, against the latest one at least 5 s older
// (else the first), when at least 0.5 s apart; a mean needs new samples in between.
function referenceWindowed(samples) {
  const rates = [], means = [];
  for (let i = 1; i < samples.length; ++i) {
    let j = 0;
    for (let k = 0; k < i; ++k) if (samples[k].t <= samples[i].t - 5) j = k;
    const a = samples[i], b = samples[j], far = a.t - b.t >= 0.5;
    rates.push([a.t, far ? (a.c - b.c) / (a.t - b.t) : null]);
    means.push([a.t, far && a.n > b.n ? (a.s - b.s) / (a.n - b.n) : null]);
  }
  return { rates, means };
}

// What the engines table must show for an engine's speculation (written from the admin status).
function speculationText(e) {
  const s = e.speculation;
  if (!s || !e.spec_decode) return "–";
  if (!s.enabled) return "off";
  if (!s.draft_tokens) return "on";
  return Math.round(100 * s.accepted_tokens / s.draft_tokens) + "% of " + s.draft_tokens;
}

// What the engines table must show for an engine's KV blocks: those held of the pool, and with a prefix
// cache the blocks it keeps and the share of prompts that hit.
function kvText(e) {
  const kv = e.kv || {};
  if (kv.total_blocks === undefined) return "–";
  const cached = kv.cached_blocks || 0;
  let text = (kv.total_blocks - kv.free_blocks - cached) + " / " + kv.total_blocks;
  const p = e.prefix_cache;
  if (p && p.enabled) text += " · " + cached + " cached" + (p.lookups ? ", " + Math.round(100 * p.hits / p.lookups) + "% hits" : "");
  const c = e.kv_connectors;  // KV tiers (ABI 1.9), first asked first
  if (c && c.layers && c.layers.length)
    text += " · tiers " + c.layers.map(l => l.id + " " + l.stored_blocks + " stored, " + l.loaded_blocks + " loaded").join("; ");
  return text;
}

// Mismatches between the page's engine rows and the API's engines (in the API's order).
function engineMismatches(rows, engines, where, counters) {
  const out = [];
  if (rows.map(r => r.name).join(",") !== engines.map(e => e.name).join(","))
    out.push(`${where}: page shows [${rows.map(r => r.name)}], the API has [${engines.map(e => e.name)}]`);
  engines.forEach((e, i) => {
    const row = rows[i];
    if (!row) return;
    const expect = { model: e.model, device: e.device, state: e.retiring ? "retiring" : e.state && e.state !== "serving" ? e.state : e.draining ? "draining" : "serving" };
    if (counters) Object.assign(expect, { sequences: String(e.sequences), tokens_out: String(e.tokens_out), speculation: speculationText(e), kv_blocks: kvText(e) });
    for (const [k, v] of Object.entries(expect))
      if (row.fields[k] !== v) out.push(`${where} ${e.name}: ${k} shown as '${row.fields[k]}', the API says '${v}'`);
    const slots = Object.keys(e).filter(k => SLOTS.includes(k) || (e[k] && typeof e[k] === "object" && "id" in e[k] && "version" in e[k]));
    if (row.slots.map(s => s.slot).sort().join(",") !== slots.sort().join(","))
      out.push(`${where} ${e.name}: slots shown [${row.slots.map(s => s.slot)}], the API has [${slots}]`);
    for (const slot of slots) {
      const p = e[slot], shown = row.slots.find(s => s.slot === slot);
      if (!shown) continue;
      const text = p ? `${slot} ${p.id} ${p.version}` : `${slot} (empty)`;
      if (shown.id !== (p ? p.id : "") || shown.version !== (p ? p.version : "") || shown.text !== text)
        out.push(`${where} ${e.name}: slot shown as '${shown.text}' (${shown.id} ${shown.version}), the API has '${text}'`);
    }
  });
  return out;
}

// The expert-load heat maps: one per MoE engine (those with expert_load), its worst layer's imbalance
// and a row of cells per layer as the API has them.
function expertMismatches(page, engines) {
  const out = [], moe = engines.filter(e => e.expert_load && e.expert_load.layers);
  if (page.expertsShown !== moe.length > 0) out.push(`experts section shown: ${page.expertsShown}, the API has ${moe.length} MoE engines`);
  if (page.expertMaps.map(m => m.engine).join(",") !== moe.map(e => e.name).join(","))
    out.push(`heat maps for [${page.expertMaps.map(m => m.engine)}], the API's MoE engines are [${moe.map(e => e.name)}]`);
  moe.forEach((e, i) => {
    const m = page.expertMaps[i];
    if (!m) return;
    if (m.maxImbalance !== e.expert_load.max_imbalance.toFixed(2))
      out.push(`${e.name}: worst layer shown ${m.maxImbalance}x, the API has ${e.expert_load.max_imbalance.toFixed(2)}x`);
    if (m.rows !== e.expert_load.layers.length * 10 + 4) out.push(`${e.name}: heat map ${m.rows} px high for ${e.expert_load.layers.length} layers`);
  });
  return out;
}

function serverMismatches(page, status) {
  const out = engineMismatches(page.engines, status.engines, "engines", true);
  out.push(...expertMismatches(page, status.engines));
  out.push(...engineMismatches(page.retiring, status.retiring_engines, "retiring engines", false));
  if (page.retiringShown !== status.retiring_engines.length > 0)
    out.push(`retiring section shown: ${page.retiringShown}, the API has ${status.retiring_engines.length}`);
  const r = status.router.router;
  if (page.router.id !== r.id || page.router.version !== r.version || page.router.text !== `${r.id} ${r.version}`)
    out.push(`router shown as '${page.router.text}', the API has '${r.id} ${r.version}'`);
  if (page.openLibraries !== String(status.open_libraries))
    out.push(`open libraries shown as ${page.openLibraries}, the API has ${status.open_libraries}`);
  return out;
}

function experimentMismatches(page, list, reports) {
  const out = [];
  if (page.experiments.map(e => e.name).join(",") !== list.map(e => e.name).join(","))
    out.push(`experiments shown [${page.experiments.map(e => e.name)}], the API has [${list.map(e => e.name)}]`);
  list.forEach((exp, i) => {
    const card = page.experiments[i], report = reports[i];
    if (!card) return;
    if (card.state !== report.state) out.push(`${exp.name}: state shown ${card.state}, the report says ${report.state}`);
    if (card.arms.map(a => a.name).join(",") !== exp.arms.map(a => a.name).join(","))
      out.push(`${exp.name}: arms shown [${card.arms.map(a => a.name)}], the API has [${exp.arms.map(a => a.name)}]`);
    for (const arm of exp.arms) {
      const shown = card.arms.find(a => a.name === arm.name), r = report.arms.find(a => a.name === arm.name);
      if (!shown || !r) continue;
      const expect = { engine: arm.engine, percent: `${arm.percent}%`, requests: String(r.requests), failed: String(r.failed),
                       held_back: r.held_back === undefined ? "–" : String(r.held_back), tokens_out: String(r.tokens_out) };
      for (const [k, v] of Object.entries(expect))
        if (shown.fields[k] !== v) out.push(`${exp.name}/${arm.name}: ${k} shown as '${shown.fields[k]}', the API says '${v}'`);
    }
    const comparisons = report.comparisons || [];
    if (card.comparisons.length !== comparisons.length)
      out.push(`${exp.name}: ${card.comparisons.length} comparisons shown, the report has ${comparisons.length}`);
    comparisons.forEach((c, k) => {
      const shown = card.comparisons[k];
      if (shown && (shown.metric !== c.metric || !shown.text.includes(c.verdict)))
        out.push(`${exp.name}: comparison shown '${shown.text}', the report says '${c.metric}: ${c.verdict}'`);
    });
  });
  return out;
}

// tokenhost bench for `seconds` against the gateway; its JSON figures.
function runBench(seconds, model = "stories260K") {
  return new Promise((resolve, reject) => {
    const args = ["bench", "--url", GATEWAY, "--model", model, "--concurrency", model === "stories260K" ? "4" : "1", "--duration", String(seconds), "--prompt-tokens", "8:32",
                  "--output-tokens", "24", "--ignore-eos", "--quiet", "--json", "-"];
    const p = spawn(env("TOKENHOST"), args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "", err = "";
    p.stdout.on("data", d => { out += d; });
    p.stderr.on("data", d => { err += d; });
    p.on("error", reject);
    p.on("exit", code => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`tokenhost bench exited ${code}:\n${err}`))));
  });
}

async function main() {
  await apiOk("POST", "/admin/experiments", {
    name: "attention", sticky_key: "none",
    arms: [{ name: "flash", engine: "fast", percent: 50 }, { name: "reference", engine: "ref", percent: 50 }],
  });
  ok("experiment 'attention' started through POST /admin/experiments");
  const experiments = async () => {
    const list = (await apiOk("GET", "/admin/experiments")).experiments;
    const reports = await Promise.all(list.map(e => apiOk("GET", `/admin/experiments/${encodeURIComponent(e.name)}/report`)));
    return { list, reports };
  };

  const browser = await Browser.start({ chromedriver: env("CHROMEDRIVER"), chromium: env("CHROMIUM"), profileDir: env("PROFILE_DIR") });
  try {
    const page = () => browser.run(readPage);

    // A wrong token: said so, with the form to give another; the token leaves the address bar.
    await browser.go(`${ADMIN}/dashboard#token=not-the-token`);
    let p = await eventually("the page says the token was refused", 10000, async () => {
      const p = await page();
      return [p.conn === "unauthorized" && /refused the admin token \(401/.test(p.auth || ""), p];
    });
    if (p.hash !== "") throw new Error(`the token stays in the URL: '${p.hash}'`);
    ok(`a wrong token is refused on the page: "${p.auth}"`);

    // The right token through the form.
    await browser.type("#token-input", TOKEN);
    await browser.click("#token-form button");
    await eventually("the page reads the API after the token is given", 10000, async () => {
      const p = await page();
      return [p.conn === "ok" && p.auth === null && p.engines.length > 0, p];
    });
    ok("the token given in the form is used");
    await browser.refresh();
    await eventually("a reload keeps the token of this tab", 10000, async () => {
      const p = await page();
      return [p.conn === "ok" && p.engines.length > 0, p];
    });
    ok("a reload keeps the token (sessionStorage)");

    // Load while the page watches, so that its live charts have something to draw.
    // (and one stream on the MoE engine, so that every engine's charts and the heat map have data)
    const [bench] = await Promise.all([runBench(6), runBench(6, "moe")]);
    ok(`load: ${bench.requests_ok} requests, ${bench.output_throughput.toFixed(0)} tokens/s (tokenhost bench, 6 s)`);

    // What the page shows agrees with the API (now that the load is over, within a few polls).
    p = await eventually("the page agrees with the admin API", 8000, async () => {
      const [p, status, exps] = await Promise.all([page(), apiOk("GET", "/admin/engines"), experiments()]);
      const bad = [...serverMismatches(p, status), ...experimentMismatches(p, exps.list, exps.reports)];
      if (exps.list.length === 0) bad.push("no experiment to compare");
      return [bad.length === 0, bad.join("\n") || p];
    });
    const arms = p.experiments.flatMap(e => e.arms.map(a => `${e.name}/${a.name}: ${a.fields.requests} requests`));
    ok(`engines [${p.engines.map(e => e.name)}], their ${p.engines.flatMap(e => e.slots).length} slots with ids and versions, ` +
       `router ${p.router.text}, open libraries ${p.openLibraries} and ${arms.join(", ")} shown as the API has them`);
    if (p.expertMaps.length !== 1 || !(Number(p.expertMaps[0].maxImbalance) >= 1))
      throw new Error("no expert-load heat map for the MoE engine after its load: " + JSON.stringify(p.expertMaps));
    ok(`expert-load heat map of engine ${p.expertMaps[0].engine}: worst layer ${p.expertMaps[0].maxImbalance}x its mean, as the API has it`);
    if (p.experiments.some(e => e.arms.some(a => !(Number(a.fields.requests) > 0))))
      throw new Error("an arm served no request under load: " + JSON.stringify(p.experiments));

    // The figures the charts plot: the page's windowed rates and means against plain loops on random samples.
    for (let run = 0; run < 5; ++run) {
      const samples = [];
      let t = 1.7e9 + Math.random() * 1e6, c = 0, sum = 0, n = 0;
      for (let i = 0; i < 60; ++i) {
        t += 0.2 + Math.random() * 2;
        const k = Math.random() < 0.3 ? 0 : Math.floor(Math.random() * 20);
        n += k; sum += k * Math.random() * 0.05; c += Math.floor(Math.random() * 500);
        samples.push({ t, c, s: sum, n });
      }
      const got = await browser.run(pageWindowed, `check:${run}`, samples), want = referenceWindowed(samples);
      for (const what of ["rates", "means"]) {
        const bad = want[what].findIndex(([tw, vw], i) => {
          const [tg, vg] = got[what][i] || [];
          return tg !== tw || (vw === null ? vg !== null : !(Math.abs(vg - vw) <= 1e-9 * Math.max(1, Math.abs(vw))));
        });
        if (got[what].length !== want[what].length || bad >= 0)
          throw new Error(`windowed ${what} differ from the reference at ${bad}: page ${JSON.stringify(got[what][bad])}, reference ${JSON.stringify(want[what][bad])}`);
      }
    }
    ok("the charts' windowed rates and means equal a plain-loop reference on random samples");

    // Live charts: a line per arm and per engine (points in view, from the canvas's data-points),
    // drawn in the series' colours (their pixels below the legend; lines that coincide may hide one
    // another, so the pixels are counted over all series).
    for (const [what, chart, swatches, series] of [
      ["engine tokens/s", "#chart-engine-throughput", "#engines .swatch", p.engines.map(e => e.name)],
      ["engine TTFT", "#chart-engine-ttft", "#engines .swatch", p.engines.map(e => e.name)],
      ...["ttft", "itl", "throughput"].map(c =>
        [`arm ${c}`, `#experiments [data-chart="${c}"]`, "#experiments tr[data-arm] .swatch", p.experiments[0].arms.map(a => a.name)]),
    ]) {
      const points = JSON.parse(await browser.run(sel => document.querySelector(sel).dataset.points || "{}", chart));
      const ink = await browser.run(chartInk, chart, await browser.run(swatchColors, swatches));
      const total = ink.reduce((a, b) => a + b, 0);
      if (series.some(s => !(points[s] >= 2)) || Object.keys(points).length !== series.length || total < 40)
        throw new Error(`${what} chart: points ${JSON.stringify(points)} for series [${series}], line pixels ${JSON.stringify(ink)}`);
      ok(`${what} chart draws a line per series (points ${JSON.stringify(points)}, pixels ${ink.join(", ")})`);
    }

    // Swaps show within a few seconds: the router to a fixture v1 then v2, an engine's attention slot.
    const fixtures = env("FIXTURES");
    for (const [manifest, version] of [["router_v1", "1.0.0"], ["router_v2", "2.0.0"]]) {
      await apiOk("POST", "/admin/plugins", { manifest: `${fixtures}/${manifest}/plugin.toml` });
      const t0 = Date.now();
      await apiOk("POST", "/admin/router", { plugin: "router.fixture" });
      await eventually(`the page shows router.fixture ${version}`, 6000, async () => {
        const p = await page();
        return [p.router.id === "router.fixture" && p.router.version === version && p.router.text === `router.fixture ${version}`, p.router];
      });
      ok(`router swapped to router.fixture ${version}: shown after ${Date.now() - t0} ms`);
    }
    const t0 = Date.now();
    await apiOk("POST", "/admin/engines/fast/slots/attention", { plugin: "attention.reference" });
    await eventually("the page shows the new attention plugin of engine fast", 6000, async () => {
      const [p, status] = await Promise.all([page(), apiOk("GET", "/admin/engines")]);
      const shown = p.engines.find(e => e.name === "fast")?.slots.find(s => s.slot === "attention");
      const bad = serverMismatches(p, status);
      return [shown?.id === "attention.reference" && bad.length === 0, bad.join("\n") || shown];
    });
    ok(`engine fast's attention swapped to attention.reference: shown after ${Date.now() - t0} ms`);

    // Retiring engines: a kvcache swap of an engine holding sequences starts a new engine and retires
    // the old one, which finishes its requests.
    const long = Array.from({ length: 24 }, (_, i) => fetch(GATEWAY + "/v1/completions", {
      method: "POST", body: JSON.stringify({ prompt: `Once upon a time ${i}`, max_tokens: 480, ignore_eos: true }),
    }).then(r => r.text()));
    const busy = await eventually("an engine holds sequences", 5000, async () => {
      const s = await apiOk("GET", "/admin/engines");
      const e = s.engines.find(e => e.sequences > 0);
      return [e !== undefined, e ? e.name : s.engines.map(e => `${e.name}: ${e.sequences}`).join(", ")];
    });
    await apiOk("POST", `/admin/engines/${busy}/slots/kvcache`, { plugin: "kvcache.paged", config: { block_size: 32 } });
    let shot = null;
    p = await eventually(`the page shows engine ${busy} retiring`, 6000, async () => {
      const [p, status] = await Promise.all([page(), apiOk("GET", "/admin/engines")]);
      if (status.retiring_engines.length === 0) return [false, "the API lists no retiring engine (its requests finished?)"];
      const bad = engineMismatches(p.retiring, status.retiring_engines, "retiring engines", false);
      if (!p.retiringShown) bad.push("the retiring section is hidden");
      if (bad.length) return [false, bad.join("\n")];
      shot = await browser.fullPageScreenshot();
      return [true, p.retiring];
    });
    ok(`retiring engine shown: ${p.map(e => `${e.name} (${e.fields.state}, ${e.fields.sequences} sequences)`)}`);
    writeFileSync(env("SCREENSHOT"), shot);
    console.log(`screenshot: ${env("SCREENSHOT")}`);
    await Promise.all(long);
    await eventually("the retired engine leaves the page", 8000, async () => {
      const p = await page();
      return [!p.retiringShown && p.retiring.length === 0, p.retiring];
    });
    ok("the retiring engine leaves the page once its requests are done");

    // A plugin fault stops an engine: the page shows it restarting, with the fault as its reason, as
    // the API does; an admin swap into the slot repairs it.
    await apiOk("POST", "/admin/plugins", { manifest: `${fixtures}/sched_faulty/plugin.toml` });
    await apiOk("POST", "/admin/engines/fast/slots/scheduler", { plugin: "scheduler.faulty", config: { fault: "garbage", fault_on_call: 1 } });
    await eventually("engine fast stops on its scheduler's fault", 15000, async () => {
      await fetch(GATEWAY + "/v1/completions", { method: "POST", body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 4 }) })
        .then(r => r.text());
      const s = await apiOk("GET", "/admin/engines");
      const fast = s.engines.find(e => e.name === "fast");
      return [fast.state === "restarting", fast.state];
    });
    const downShown = await eventually("the page shows engine fast restarting, with its fault", 6000, async () => {
      const p = await page();
      const fast = p.engines.find(e => e.name === "fast");
      return [fast?.fields.state === "restarting" && /scheduler\.faulty/.test(fast?.stateTitle || ""), fast && [fast.fields.state, fast.stateTitle]];
    });
    ok(`a down engine is shown: ${downShown.join(": ")}`);
    const health = await fetch(ADMIN + "/health").then(r => r.json());
    if (health.status !== "degraded" || health.engines_down[0]?.engine !== "fast")
      throw new Error(`/health while fast is down: ${JSON.stringify(health)}`);
    const repaired = await apiOk("POST", "/admin/engines/fast/slots/scheduler", { plugin: "scheduler.continuous" });
    await eventually("the page shows engine fast serving again", 6000, async () => {
      const p = await page();
      return [p.engines.find(e => e.name === "fast")?.fields.state === "serving", p.engines.map(e => e.fields.state)];
    });
    ok(`an admin swap repairs it (${JSON.stringify(repaired)}), and the page shows it serving`);

    // The guards: turned on live through the admin API, the page shows the policies and each engine's
    // breaker as the API does.
    await apiOk("PATCH", "/admin/guards", { breakers: { enabled: true, failures: 3 },
      overload: { enabled: true, classes: [{ name: "batch", shed_at: 0.5 }, { name: "interactive" }], default_class: "batch" } });
    const guards = await apiOk("GET", "/admin/guards");
    const shownGuards = await eventually("the page shows the guards as the API has them", 6000, async () => {
      const p = await page();
      const states = Object.fromEntries(p.breakers.map(b => [b.engine, b.fields.state]));
      const want = Object.fromEntries(guards.breakers.engines.map(b => [b.engine, b.state]));
      return [/^on: open after 3 consecutive failures/.test(p.breakersPolicy || "") && /batch at 50%/.test(p.overloadPolicy || "") &&
              JSON.stringify(states) === JSON.stringify(want) && p.breakers.length > 0, [p.breakersPolicy, p.overloadPolicy, states, want]];
    });
    ok(`the guards are shown: ${shownGuards[0]}; ${shownGuards[1]}; breakers ${JSON.stringify(shownGuards[2])}`);

    // The server goes away: the page says it cannot reach it.
    process.kill(Number(env("SERVER_PID")), "SIGTERM");
    const problem = await eventually("the page says the server is unreachable", 15000, async () => {
      const p = await page();
      return [p.conn === "unreachable" && /Cannot reach the tokenhost admin API/.test(p.problem || ""), p.problem];
    });
    ok(`a stopped server is reported: "${problem}"`);
  } finally {
    await browser.quit();
  }
  console.log(`dashboard: ${checks} passed, 0 failed`);
}

main().catch(e => {
  console.error("FAIL: " + (e.stack || e));
  process.exit(1);
});
