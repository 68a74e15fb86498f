// TEST DOUBLE, used only when the server under test has no experiments API (GET /admin/experiments
// answers 404): an HTTP server in front of the real admin API that answers GET /admin/experiments and
// GET /admin/experiments/NAME/report with one made-up experiment (shaped as the admin API's contract
// says) and forwards every other request, the dashboard page included, to the real server unchanged.
// Its arms' counters grow only while setLoad(true), so that the page can be compared with it at rest.
import http from "node:http";

export function startStandIn(adminUrl, token) {
  const started = Date.now() / 1000;
  const arms = [
    { name: "flash", engine: "fast", percent: 50, ttft: 0.012, itl: 0.004 },
    { name: "reference", engine: "ref", percent: 50, ttft: 0.019, itl: 0.006 },
  ];
  const counts = arms.map(() => ({ requests: 0, tokens_out: 0 }));
  let loadSince = null, ticks = 0;
  // Under load, flash serves 8 requests of 24 tokens a second, reference 4.
  const advance = () => {
    if (loadSince === null) return;
    const now = Date.now() / 1000;
    const whole = Math.floor((now - loadSince) * 4);  // quarter seconds
    for (; ticks < whole; ++ticks) counts.forEach((c, i) => { c.requests += 2 - i; c.tokens_out += 24 * (2 - i); });
  };
  const stat = (n, mean) => ({ n, mean, ci95: [mean * 0.9, mean * 1.1], p50: mean, p99: mean * 2 });
  const list = () => ({ experiments: [{
    name: "attention", state: "running", sticky_key: "none", started_unix: Math.floor(started), allow_request_choice: false,
    arms: arms.map(a => ({ name: a.name, engine: a.engine, percent: a.percent, holdback_classes: [] })),
  }] });
  const report = () => {
    advance();
    // Means that drift with the count, so that the live charts have a shape.
    return {
      name: "attention", state: "running", elapsed_s: Date.now() / 1000 - started,
      arms: arms.map((a, i) => {
        const c = counts[i], drift = 1 + 0.2 * Math.sin(c.requests / 7);
        return {
          name: a.name, engine: a.engine, percent: a.percent, requests: c.requests, failed: 0, tokens_out: c.tokens_out,
          throughput_tok_s: c.tokens_out / Math.max(1, Date.now() / 1000 - started),
          ttft_s: stat(c.requests, a.ttft * drift), itl_s: stat(c.tokens_out - c.requests, a.itl * drift),
          e2e_s: stat(c.requests, a.ttft + 23 * a.itl), plugin_metrics: {},
        };
      }),
      comparisons: [{
        metric: "ttft_s", baseline: "flash", candidate: "reference", diff: 0.007, ratio: 1.58, ci95: [0.004, 0.010],
        p_value: 0.001, significant: counts[0].requests >= 15,
        verdict: counts[0].requests >= 15 ? "reference is slower (ttft_s 58% higher)" : `no significant difference yet (n=${counts[0].requests}/15)`,
      }],
    };
  };

  const target = new URL(adminUrl);
  const server = http.createServer((req, res) => {
    const path = req.url.split("?")[0];
    const m = req.method === "GET" && path.match(/^\/admin\/experiments(?:\/([^/]+)\/report)?$/);
    if (m) {
      const send = (status, body) => { res.writeHead(status, { "Content-Type": "application/json" }); res.end(JSON.stringify(body)); };
      if (req.headers.authorization !== "Bearer " + token) return send(401, { error: { message: "wrong admin token", type: "authentication_error" } });
      if (m[1] === undefined) return send(200, list());
      if (decodeURIComponent(m[1]) !== "attention") return send(404, { error: { message: `no experiment '${m[1]}'`, type: "admin_error" } });
      return send(200, report());
    }
    const forward = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, up => {
      res.writeHead(up.statusCode, up.headers);
      up.pipe(res);
    });
    forward.on("error", () => { req.socket.destroy(); });  // the real server is gone: so is this one, to the page
    req.pipe(forward);
  });
  return new Promise(resolve => server.listen(0, "127.0.0.1", () => resolve({
    url: `http://127.0.0.1:${server.address().port}`,
    setLoad(on) { advance(); loadSince = on ? Date.now() / 1000 : null; ticks = 0; },
    close() { server.closeAllConnections?.(); server.close(); },
  })));
}
