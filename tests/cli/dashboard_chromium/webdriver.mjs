// A minimal W3C WebDriver client over Node's built-in fetch: starts chromedriver, opens a headless
// Chromium session, and offers the few commands the dashboard test uses.
import { spawn } from "node:child_process";
import net from "node:net";

const ELEMENT = "element-6066-11e4-a52e-4f735466cecf";

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export const sleep = ms => new Promise(r => setTimeout(r, ms));

export class Browser {
  // chromedriver and chromium: paths of the two programs; profileDir: a folder for the profile.
  static async start({ chromedriver, chromium, profileDir, width = 1400, height = 1100 }) {
    const port = await freePort();
    const driver = spawn(chromedriver, [`--port=${port}`], { stdio: ["ignore", "pipe", "pipe"] });
    let driverLog = "";
    driver.stdout.on("data", d => { driverLog += d; });
    driver.stderr.on("data", d => { driverLog += d; });
    const base = `http://127.0.0.1:${port}`;
    const b = new Browser(base, driver, () => driverLog);
    for (let i = 0; ; ++i) {
      try {
        const r = await fetch(base + "/status");
        if (r.ok && (await r.json()).value.ready) break;
      } catch (_) { /* not listening yet */ }
      if (driver.exitCode !== null || i > 100) {
        driver.kill();
        throw new Error(`chromedriver did not start on port ${port}:\n${driverLog}`);
      }
      await sleep(100);
    }
    const session = await b.command("POST", "/session", {
      capabilities: {
        alwaysMatch: {
          browserName: "chrome",
          "goog:chromeOptions": {
            binary: chromium,
            // Root in a container: no sandbox, and /dev/shm is often too small for the renderer.
            args: ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                   `--window-size=${width},${height}`, `--user-data-dir=${profileDir}`],
          },
        },
      },
    });
    b.session = session.sessionId;
    return b;
  }

  constructor(base, driver, log) {
    this.base = base;
    this.driver = driver;
    this.log = log;
    this.session = null;
  }

  async command(method, path, body) {
    const res = await fetch(this.base + path, {
      method,
      headers: { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const json = await res.json();
    if (!res.ok) throw new Error(`WebDriver ${method} ${path}: ${json.value.error}: ${json.value.message}`);
    return json.value;
  }
  s(path) { return `/session/${this.session}${path}`; }

  go(url) { return this.command("POST", this.s("/url"), { url }); }
  refresh() { return this.command("POST", this.s("/refresh"), {}); }
  // Runs fn (a function without free variables) in the page with args; returns its JSON result.
  run(fn, ...args) {
    return this.command("POST", this.s("/execute/sync"), { script: `return (${fn.toString()}).apply(null, arguments);`, args });
  }
  async find(css) {
    const v = await this.command("POST", this.s("/element"), { using: "css selector", value: css });
    return v[ELEMENT];
  }
  async type(css, text) { return this.command("POST", this.s(`/element/${await this.find(css)}/value`), { text }); }
  async click(css) { return this.command("POST", this.s(`/element/${await this.find(css)}/click`), {}); }
  async screenshot() { return Buffer.from(await this.command("GET", this.s("/screenshot")), "base64"); }
  // The whole page, not only what fits the window: the window grows to the page's height for the shot.
  async fullPageScreenshot() {
    const rect = await this.command("GET", this.s("/window/rect"));
    const height = await this.run(() => document.documentElement.scrollHeight);
    await this.command("POST", this.s("/window/rect"), { width: rect.width, height: Math.max(rect.height, height + 100) });
    try {
      return await this.screenshot();
    } finally {
      await this.command("POST", this.s("/window/rect"), { width: rect.width, height: rect.height });
    }
  }

  async quit() {
    try {
      if (this.session) await this.command("DELETE", this.s(""));
    } finally {
      this.driver.kill();
    }
  }
}

// Polls check() (async, returning [ok, detail]) until ok or timeoutMs; throws with the last detail.
export async function eventually(what, timeoutMs, check) {
  const until = Date.now() + timeoutMs;
  let detail = "";
  for (;;) {
    const [ok, d] = await check();
    if (ok) return d;
    detail = d;
    if (Date.now() > until) throw new Error(`${what}: not within ${timeoutMs} ms; last seen: ${typeof detail === "string" ? detail : JSON.stringify(detail, null, 1)}`);
    await sleep(250);
  }
}
