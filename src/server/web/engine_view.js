// The live engine view: polls /metrics (Prometheus text, vLLM's names), turns counters into
// rates between two polls, and draws one small canvas plot per series over the last minutes.
// Each plot's latest values are also written to its element's data- attributes
// (data-value: what the plot shows now; for a rate also data-total, data-prev-total and data-dt,
// the two counter readings and the seconds between them), so a test can check them against
// /metrics.
"use strict";

const EngineView = (() => {
  const HISTORY_S = 300;  // the plots' time span
  const POLL_MS = 1000;

  // Prometheus text -> {name: value}, summing a metric's samples over its label sets (one engine).
  function parseMetrics(text) {
    const out = {};
    for (const raw of text.split("\n")) {
      const line = raw.trim();
      if (!line || line.startsWith("#")) continue;
      const m = /^([a-zA-Z_:][\w:]*)(\{.*\})?\s+(\S+)/.exec(line);
      if (!m) continue;
      const v = m[3] === "+Inf" ? Infinity : m[3] === "-Inf" ? -Infinity : parseFloat(m[3]);
      if (Number.isNaN(v)) continue;
      out[m[1]] = (out[m[1]] || 0) + v;
    }
    return out;
  }

  // The series: what each plot shows, from two consecutive samples (prev may be null).
  const SERIES = [
    { id: "prompt_tps", title: "Prompt tokens/s", unit: "tok/s", counter: "vllm:prompt_tokens_total" },
    { id: "decode_tps", title: "Decode tokens/s", unit: "tok/s", counter: "vllm:generation_tokens_total" },
    { id: "running", title: "Running requests", unit: "", gauge: "vllm:num_requests_running", integer: true },
    { id: "waiting", title: "Waiting requests", unit: "", gauge: "vllm:num_requests_waiting", integer: true },
    { id: "kv_cache", title: "KV cache used", unit: "%", gauge: "vllm:kv_cache_usage_perc", scale: 100, max: 100 },
    { id: "prefix_hits", title: "Prefix-cache hits", unit: "tok/s", counter: "vllm:prefix_cache_hits_total" },
  ];

  function create(root, api) {
    const history = new Map(SERIES.map((s) => [s.id, []]));
    const els = new Map();
    let prev = null;
    let timer = null;
    let polls = 0;

    for (const s of SERIES) {
      const fig = document.createElement("figure");
      fig.className = "plot";
      fig.dataset.metric = s.id;
      const cap = document.createElement("figcaption");
      const name = document.createElement("span");
      name.textContent = s.title;
      const value = document.createElement("span");
      value.className = "plot-value";
      value.textContent = "–";
      cap.append(name, value);
      const canvas = document.createElement("canvas");
      canvas.setAttribute("role", "img");
      canvas.setAttribute("aria-label", s.title + " over the last " + HISTORY_S / 60 + " minutes");
      fig.append(cap, canvas);
      root.querySelector(".plots").append(fig);
      els.set(s.id, { fig, value, canvas });
    }
    const status = root.querySelector(".engine-status");
    const hitRate = root.querySelector(".engine-hit-rate");

    function format(s, v) {
      if (s.integer) return String(Math.round(v));
      if (v > 0 && v < 0.01) return v.toPrecision(1);
      if (v >= 100) return v.toFixed(0);
      if (v >= 10) return v.toFixed(1);
      return v.toFixed(2);
    }

    function sample(m, t) {
      for (const s of SERIES) {
        const el = els.get(s.id);
        let v;
        if (s.counter) {
          const total = m[s.counter] || 0;
          el.fig.dataset.total = String(total);
          if (!prev) continue;  // a rate needs two readings
          const dt = (t - prev.t) / 1000;
          const before = prev.m[s.counter] || 0;
          v = dt > 0 ? Math.max(0, total - before) / dt : 0;
          el.fig.dataset.prevTotal = String(before);
          el.fig.dataset.dt = String(dt);
        } else {
          v = (m[s.gauge] || 0) * (s.scale || 1);
        }
        el.fig.dataset.value = String(v);
        el.value.textContent = format(s, v) + (s.unit ? " " + s.unit : "");
        const h = history.get(s.id);
        h.push({ t, v });
        while (h.length && h[0].t < t - HISTORY_S * 1000) h.shift();
      }
      const q = m["vllm:prefix_cache_queries_total"] || 0;
      const hits = m["vllm:prefix_cache_hits_total"] || 0;
      hitRate.textContent = q > 0 ? `hit rate ${(100 * hits / q).toFixed(1)} % of ${q} prompt tokens` : "no prompts yet";
      root.dataset.hitRate = String(q > 0 ? hits / q : 0);
      prev = { m, t };
      polls++;
      root.dataset.polls = String(polls);
      draw();
    }

    function draw() {
      const now = Date.now();
      const css = getComputedStyle(root);
      const line = css.getPropertyValue("--plot-line").trim() || "#3b82f6";
      const fill = css.getPropertyValue("--plot-fill").trim() || "rgba(59,130,246,.15)";
      const grid = css.getPropertyValue("--plot-grid").trim() || "#e5e7eb";
      const text = css.getPropertyValue("--muted").trim() || "#6b7280";
      for (const s of SERIES) {
        const { canvas } = els.get(s.id);
        const w = canvas.clientWidth, h = canvas.clientHeight;
        if (!w || !h) continue;  // hidden panel
        const dpr = window.devicePixelRatio || 1;
        if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
          canvas.width = Math.round(w * dpr);
          canvas.height = Math.round(h * dpr);
        }
        const g = canvas.getContext("2d");
        g.setTransform(dpr, 0, 0, dpr, 0, 0);
        g.clearRect(0, 0, w, h);
        const pts = history.get(s.id);
        const top = Math.max(s.max || 0, niceCeil(Math.max(1, ...pts.map((p) => p.v))));
        // The span grows from one minute to HISTORY_S as samples come in.
        const span = Math.min(HISTORY_S * 1000, Math.max(60000, pts.length ? now - pts[0].t : 0));
        const x = (t) => w - ((now - t) / span) * w;
        const y = (v) => h - 2 - (v / top) * (h - 14);
        g.strokeStyle = grid;
        g.lineWidth = 1;
        g.beginPath();
        for (const f of [0, 0.5, 1]) { g.moveTo(0, Math.round(y(top * f)) + 0.5); g.lineTo(w, Math.round(y(top * f)) + 0.5); }
        g.stroke();
        g.fillStyle = text;
        g.font = "10px system-ui, sans-serif";
        g.textBaseline = "top";
        g.fillText(format(s, top), 2, 0);
        if (pts.length < 1) continue;
        g.beginPath();
        pts.forEach((p, i) => {
          if (!i) return g.moveTo(x(p.t), y(p.v));
          if (s.integer) g.lineTo(x(p.t), y(pts[i - 1].v));  // counts change in steps
          g.lineTo(x(p.t), y(p.v));
        });
        g.strokeStyle = line;
        g.lineWidth = 1.5;
        g.stroke();
        g.lineTo(x(pts[pts.length - 1].t), h);
        g.lineTo(x(pts[0].t), h);
        g.closePath();
        g.fillStyle = fill;
        g.fill();
      }
    }

    function niceCeil(v) {
      const p = Math.pow(10, Math.floor(Math.log10(v)));
      for (const k of [1, 2, 5, 10]) if (v <= k * p) return k * p;
      return 10 * p;
    }

    async function poll() {
      try {
        const r = await api("/metrics");
        if (r.status === 401) {
          status.textContent = "/metrics needs the API key (Settings)";
          root.dataset.state = "unauthorized";
        } else if (!r.ok) {
          status.textContent = `/metrics: HTTP ${r.status}`;
          root.dataset.state = "error";
        } else {
          sample(parseMetrics(await r.text()), Date.now());
          status.textContent = "live · every " + POLL_MS / 1000 + " s";
          root.dataset.state = "live";
        }
      } catch (e) {
        status.textContent = "server unreachable";
        root.dataset.state = "offline";
      }
    }

    async function loop() {
      if (!document.hidden) await poll();
      timer = setTimeout(loop, POLL_MS);
    }

    window.addEventListener("resize", draw);
    return {
      start() { if (!timer) { timer = -1; loop(); } },
      redraw: draw,
      pollNow: poll,
    };
  }

  return { create, parseMetrics, SERIES };
})();
