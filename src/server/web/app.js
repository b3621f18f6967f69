// The chat page of `fp4lm serve`: conversations (kept in localStorage), streaming replies from
// same-origin POST /v1/chat/completions (stream: true, the whole history each turn), settings
// (defaults from GET /props, the server's generation_config.json), the API key (sent as
// Authorization: Bearer), and the engine view (engine_view.js). Model text is only ever shown
// through Markdown.render (escaped first) or textContent.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const STORE = { convs: "fp4lm.conversations", current: "fp4lm.current", settings: "fp4lm.settings" };
  const SAMPLING = ["temperature", "top_p", "top_k", "max_tokens", "seed"];

  const state = {
    convs: load(STORE.convs, []),
    current: load(STORE.current, null),
    settings: Object.assign({ model: "", system: "", apiKey: "" }, load(STORE.settings, {})),
    props: null,
    models: [],
    streaming: null,  // {controller, conv, msg}
    attachments: [],  // data: URLs waiting to be sent (vision models)
  };

  function load(key, fallback) {
    try {
      const v = localStorage.getItem(key);
      return v === null ? fallback : JSON.parse(v);
    } catch (e) {
      return fallback;
    }
  }
  function save() {
    try {
      localStorage.setItem(STORE.convs, JSON.stringify(state.convs));
      localStorage.setItem(STORE.current, JSON.stringify(state.current));
      localStorage.setItem(STORE.settings, JSON.stringify(state.settings));
    } catch (e) {
      showError("The browser's storage is full: export and delete old conversations.");
    }
  }

  // ---- the server ----------------------------------------------------------------------------

  function api(path, init = {}) {
    const headers = Object.assign({}, init.headers || {});
    if (state.settings.apiKey) headers.Authorization = "Bearer " + state.settings.apiKey;
    return fetch(path, Object.assign({}, init, { headers }));
  }

  // The error a failed response carries, in words; a 401 says it is about the API key.
  async function responseError(r) {
    let msg = "";
    try {
      const j = await r.json();
      msg = (j.error && j.error.message) || JSON.stringify(j);
    } catch (e) {
      msg = r.statusText;
    }
    if (r.status === 401) {
      return `Error 401: the server needs a valid API key${state.settings.apiKey ? " (the one in Settings was refused)" : ""}` +
             ` — set it in Settings → API key. (${msg})`;
    }
    return `Error ${r.status}: ${msg}`;
  }

  function setStatus(text, kind) {
    $("status").textContent = text;
    $("status").dataset.state = kind;
  }

  async function connect() {
    let r;
    try {
      r = await api("/props");
    } catch (e) {
      setStatus("offline", "error");
      setTimeout(connect, 2000);
      return;
    }
    if (r.status === 503) {
      setStatus("loading model", "loading");
      setTimeout(connect, 1000);
      return;
    }
    if (!r.ok) {
      setStatus(r.status === 401 ? "API key needed" : "error", "error");
      $("model-name").textContent = "";
      showError(await responseError(r));
      return;
    }
    state.props = await r.json();
    hideError();
    const models = await api("/v1/models");
    if (models.ok) state.models = (await models.json()).data.map((m) => m.id);
    if (!state.models.includes(state.settings.model)) state.settings.model = state.models[0] || state.props.model;
    $("model-name").textContent = state.settings.model;
    $("model-name").title = `${state.props.model_path} · context ${state.props.max_model_len} tokens`;
    setStatus("ready", "ready");
    applyVision(Boolean(state.props.modalities && state.props.modalities.vision));
    fillSettings();
    engine.start();
  }

  // ---- conversations --------------------------------------------------------------------------

  function conv() { return state.convs.find((c) => c.id === state.current) || null; }

  function newConversation() {
    const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 8), title: "New chat",
                created: Date.now(), messages: [] };
    state.convs.unshift(c);
    state.current = c.id;
    save();
    return c;
  }

  function renderList() {
    const ul = $("conv-list");
    ul.replaceChildren();
    for (const c of state.convs) {
      const li = document.createElement("li");
      li.className = "conv" + (c.id === state.current ? " active" : "");
      const open = document.createElement("button");
      open.type = "button";
      open.className = "conv-open";
      open.textContent = c.title;
      open.title = c.title;
      open.addEventListener("click", () => { if (!state.streaming) { state.current = c.id; save(); renderAll(); closePanels(); } });
      const del = document.createElement("button");
      del.type = "button";
      del.className = "conv-del";
      del.setAttribute("aria-label", "Delete conversation " + c.title);
      del.title = "Delete";
      del.textContent = "×";
      del.addEventListener("click", () => deleteConversation(c.id));
      li.append(open, del);
      ul.append(li);
    }
  }

  function deleteConversation(id) {
    if (state.streaming && state.streaming.conv.id === id) stop();
    state.convs = state.convs.filter((c) => c.id !== id);
    if (state.current === id) state.current = state.convs.length ? state.convs[0].id : null;
    save();
    renderAll();
  }

  function download(name, data) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: "application/json" }));
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  // ---- messages -------------------------------------------------------------------------------

  function textOf(content) {
    if (typeof content === "string") return content;
    return (content || []).filter((p) => p.type === "text").map((p) => p.text).join("\n");
  }

  function renderAll() {
    renderList();
    const box = $("messages");
    box.querySelectorAll(".msg").forEach((n) => n.remove());
    const c = conv();
    $("empty").hidden = Boolean(c && c.messages.length);
    if (c) c.messages.forEach((m, i) => box.append(messageNode(c, m, i)));
    scrollDown(true);
  }

  function button(label, title, onClick) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "msg-action";
    b.textContent = label;
    b.title = title;
    b.addEventListener("click", onClick);
    return b;
  }

  function messageNode(c, m, index) {
    const node = document.createElement("article");
    node.className = "msg " + m.role;
    node.dataset.role = m.role;
    node.dataset.index = String(index);
    const body = document.createElement("div");
    body.className = "msg-body";
    node.append(body);
    fillMessage(node, m);
    const actions = document.createElement("div");
    actions.className = "msg-actions";
    if (m.role === "user") {
      actions.append(button("Edit", "Edit and send again", () => editMessage(node, c, index)));
    } else {
      actions.append(button("Copy", "Copy the reply", () => copy(textOf(m.content))));
      if (index === c.messages.length - 1) actions.append(button("Regenerate", "Answer again", () => regenerate(c)));
    }
    node.append(actions);
    return node;
  }

  // (Re)draws a message's body: text, images, reasoning, tool calls, the footer line.
  function fillMessage(node, m) {
    const body = node.querySelector(".msg-body");
    body.replaceChildren();
    if (m.reasoning) {
      const d = document.createElement("details");
      d.className = "reasoning";
      d.open = Boolean(m.reasoningOpen);
      d.addEventListener("toggle", () => { m.reasoningOpen = d.open; });
      const s = document.createElement("summary");
      s.textContent = m.pending && !textOf(m.content) ? "Reasoning…" : "Reasoning";
      const r = document.createElement("div");
      r.className = "md";
      r.innerHTML = Markdown.render(m.reasoning);  // escaped first (markdown.js)
      d.append(s, r);
      body.append(d);
    }
    const text = textOf(m.content);
    if (m.role === "user") {
      const t = document.createElement("div");
      t.className = "plain";
      t.textContent = text;
      body.append(t);
      if (Array.isArray(m.content)) {
        for (const p of m.content) {
          if (p.type !== "image_url") continue;
          const img = document.createElement("img");
          img.className = "msg-image";
          img.alt = "attached image";
          img.src = p.image_url.url;
          body.append(img);
        }
      }
    } else if (text || (!m.reasoning && !(m.tool_calls || []).length)) {
      const md = document.createElement("div");
      md.className = "md";
      md.innerHTML = Markdown.render(text);  // escaped first (markdown.js)
      if (m.pending && !text) md.classList.add("typing");
      body.append(md);
    }
    for (const call of m.tool_calls || []) {
      const t = document.createElement("div");
      t.className = "tool-call";
      const head = document.createElement("div");
      head.className = "tool-call-head";
      head.textContent = "Tool call · " + ((call.function && call.function.name) || "?");
      const args = document.createElement("pre");
      args.textContent = prettyJson((call.function && call.function.arguments) || "");
      t.append(head, args);
      body.append(t);
    }
    if (m.meta) {
      const f = document.createElement("div");
      f.className = "msg-meta";
      f.textContent = m.meta;
      body.append(f);
    }
    if (m.error) {
      const e = document.createElement("div");
      e.className = "msg-error";
      e.textContent = m.error;
      body.append(e);
    }
  }

  function prettyJson(s) {
    try { return JSON.stringify(JSON.parse(s), null, 2); } catch (e) { return s; }
  }

  function copy(text) {
    if (navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {});
  }

  function scrollDown(force) {
    const box = $("messages");
    if (force || box.scrollHeight - box.scrollTop - box.clientHeight < 80) box.scrollTop = box.scrollHeight;
  }

  function editMessage(node, c, index) {
    if (state.streaming) return;
    const m = c.messages[index];
    const body = node.querySelector(".msg-body");
    const area = document.createElement("textarea");
    area.className = "edit-area";
    area.value = textOf(m.content);
    area.setAttribute("aria-label", "Edit message");
    const row = document.createElement("div");
    row.className = "edit-actions";
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "btn ghost small";
    cancel.textContent = "Cancel";
    cancel.addEventListener("click", renderAll);
    const send = document.createElement("button");
    send.type = "button";
    send.className = "btn primary small";
    send.textContent = "Send";
    send.setAttribute("aria-label", "Send edited message");
    send.addEventListener("click", () => {
      const text = area.value;
      if (!text.trim()) return;
      m.content = Array.isArray(m.content)
        ? [{ type: "text", text }, ...m.content.filter((p) => p.type !== "text")]
        : text;
      c.messages.length = index + 1;  // the edit replaces everything after it
      save();
      renderAll();
      complete(c);
    });
    row.append(cancel, send);
    body.replaceChildren(area, row);
    area.focus();
  }

  function regenerate(c) {
    if (state.streaming) return;
    while (c.messages.length && c.messages[c.messages.length - 1].role === "assistant") c.messages.pop();
    save();
    renderAll();
    complete(c);
  }

  // ---- sending and streaming ------------------------------------------------------------------

  function send() {
    if (state.streaming) return;
    const input = $("input");
    const text = input.value;
    if (!text.trim() && !state.attachments.length) return;
    const c = conv() || newConversation();
    const content = state.attachments.length
      ? [{ type: "text", text }, ...state.attachments.map((url) => ({ type: "image_url", image_url: { url } }))]
      : text;
    c.messages.push({ role: "user", content });
    if (c.title === "New chat") c.title = text.trim().slice(0, 48) || "Image";
    input.value = "";
    autosize();
    state.attachments = [];
    renderAttachments();
    save();
    renderAll();
    complete(c);
  }

  function requestBody(c) {
    const messages = [];
    if (state.settings.system.trim()) messages.push({ role: "system", content: state.settings.system });
    for (const m of c.messages) {
      if (m.role === "assistant" && m.error && !textOf(m.content)) continue;  // a failed turn says nothing
      if (m.role === "user" || m.role === "assistant") messages.push({ role: m.role, content: m.content });
    }
    const body = { model: state.settings.model, messages, stream: true, stream_options: { include_usage: true } };
    for (const k of SAMPLING) {
      const v = state.settings[k];
      if (v !== undefined && v !== null && v !== "") body[k] = Number(v);
    }
    return body;
  }

  // Streams an assistant reply to the conversation's history.
  async function complete(c) {
    hideError();
    const body = requestBody(c);
    const m = { role: "assistant", content: "", reasoning: "", tool_calls: [], pending: true };
    c.messages.push(m);
    renderAll();
    const node = $("messages").querySelector(`.msg[data-index="${c.messages.length - 1}"]`);
    node.classList.add("streaming");
    const controller = new AbortController();
    state.streaming = { controller, conv: c, msg: m };
    setBusy(true);
    const t0 = performance.now();
    let first = 0, usage = null, finish = "";
    let redraw = 0;
    const paint = () => {
      redraw = 0;
      fillMessage(node, m);
      scrollDown(false);
    };
    try {
      const r = await api("/v1/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      if (!r.ok) throw new Error(await responseError(r));
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const event = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data:")) continue;
            const data = line.slice(5).trim();
            if (data === "[DONE]") continue;
            const j = JSON.parse(data);
            if (j.error) throw new Error(`Error ${j.error.code || ""}: ${j.error.message}`);
            if (j.usage) usage = j.usage;
            for (const ch of j.choices || []) {
              const d = ch.delta || {};
              if (!first && (d.content || d.reasoning_content)) first = performance.now();
              if (d.content) m.content += d.content;
              if (d.reasoning_content) m.reasoning += d.reasoning_content;
              for (const tc of d.tool_calls || []) {
                const slot = m.tool_calls[tc.index] || (m.tool_calls[tc.index] = { id: tc.id, type: "function", function: { name: "", arguments: "" } });
                if (tc.function && tc.function.name) slot.function.name += tc.function.name;
                if (tc.function && tc.function.arguments) slot.function.arguments += tc.function.arguments;
              }
              if (ch.finish_reason) finish = ch.finish_reason;
            }
          }
        }
        if (!redraw) redraw = requestAnimationFrame(paint);
      }
    } catch (e) {
      if (e.name === "AbortError") finish = "stopped";
      else {
        m.error = e.message;
        showError(e.message);
      }
    }
    if (redraw) cancelAnimationFrame(redraw);
    const secs = (performance.now() - t0) / 1000;
    const parts = [];
    if (usage) {
      parts.push(`${usage.completion_tokens} tokens`);
      if (first && usage.completion_tokens > 1) {
        parts.push(`${((usage.completion_tokens - 1) / Math.max(1e-3, (performance.now() - first) / 1000)).toFixed(1)} tok/s`);
      }
    }
    parts.push(`${secs.toFixed(1)} s`);
    if (finish) parts.push(finish === "stopped" ? "stopped" : `finish: ${finish}`);
    m.meta = parts.join(" · ");
    m.finish = finish;
    delete m.pending;
    if (!m.reasoning) delete m.reasoning;
    if (!m.tool_calls.length) delete m.tool_calls;
    state.streaming = null;
    setBusy(false);
    save();
    renderAll();
  }

  function stop() {
    if (state.streaming) state.streaming.controller.abort();
  }

  function setBusy(busy) {
    $("send").hidden = busy;
    $("stop").hidden = !busy;
    document.body.dataset.busy = busy ? "1" : "";
  }

  function showError(text) {
    $("error").textContent = text;
    $("error").hidden = false;
  }
  function hideError() { $("error").hidden = true; }

  // ---- images (only when /props says the model takes them) -------------------------------------

  function applyVision(on) {
    $("attach").hidden = !on;
    document.body.dataset.vision = on ? "1" : "";
  }

  function addImage(file) {
    if (!file || !file.type.startsWith("image/")) return;
    const reader = new FileReader();
    reader.onload = () => { state.attachments.push(reader.result); renderAttachments(); };
    reader.readAsDataURL(file);
  }

  function renderAttachments() {
    const box = $("attachments");
    box.replaceChildren();
    state.attachments.forEach((url, i) => {
      const img = document.createElement("img");
      img.src = url;
      img.alt = "attachment " + (i + 1);
      img.title = "Click to remove";
      img.addEventListener("click", () => { state.attachments.splice(i, 1); renderAttachments(); });
      box.append(img);
    });
    box.hidden = !state.attachments.length;
  }

  // ---- settings -------------------------------------------------------------------------------

  function fillSettings() {
    const sel = $("set-model");
    sel.replaceChildren();
    for (const id of state.models.length ? state.models : [state.settings.model]) {
      const o = document.createElement("option");
      o.value = o.textContent = id;
      sel.append(o);
    }
    sel.value = state.settings.model;
    const params = (state.props && state.props.default_generation_settings.params) || {};
    const fromFile = (state.props && state.props.generation_config) || {};
    for (const k of SAMPLING) {
      const el = $("set-" + k);
      el.value = state.settings[k] ?? "";
      if (k === "seed") continue;
      const d = params[k];
      el.placeholder = d === null || d === undefined ? (k === "max_tokens" ? "rest of context" : "") :
        `${d}${fromFile[k] !== null && fromFile[k] !== undefined ? " (model)" : " (server)"}`;
      el.dataset.default = d === null || d === undefined ? "" : String(d);
    }
    $("set-system").value = state.settings.system;
    $("set-api-key").value = state.settings.apiKey;
    const found = Object.keys(fromFile).filter((k) => fromFile[k] !== null);
    $("defaults-hint").textContent = "Empty fields use the server's defaults" +
      (found.length ? ` (${found.join(", ")} from the model's generation_config.json).` : ".");
  }

  function readSettings() {
    const s = state.settings;
    s.model = $("set-model").value || s.model;
    for (const k of SAMPLING) s[k] = $("set-" + k).value;
    s.system = $("set-system").value;
    const keyChanged = s.apiKey !== $("set-api-key").value.trim();
    s.apiKey = $("set-api-key").value.trim();
    save();
    $("model-name").textContent = s.model;
    if (keyChanged || !state.props) connect();
    else if (state.props) engine.pollNow();
  }

  // ---- panels and wiring ----------------------------------------------------------------------

  function togglePanel(which) {
    const open = !document.body.classList.contains(which + "-open");
    document.body.classList.toggle(which + "-open", open);
    $(which === "sidebar" ? "toggle-sidebar" : "toggle-engine").setAttribute("aria-expanded", String(open));
    syncScrim();
    if (which === "engine") requestAnimationFrame(engine.redraw);
  }
  function closePanels() {
    if (!window.matchMedia("(max-width: 900px)").matches) return;
    document.body.classList.remove("sidebar-open", "engine-open");
    syncScrim();
  }
  function syncScrim() {
    const narrow = window.matchMedia("(max-width: 900px)").matches;
    $("scrim").hidden = !(narrow && (document.body.classList.contains("sidebar-open") ||
                                     document.body.classList.contains("engine-open")));
  }

  function autosize() {
    const t = $("input");
    t.style.height = "auto";
    t.style.height = Math.min(t.scrollHeight, 200) + "px";
  }

  const engine = EngineView.create($("engine"), (path) => api(path));

  function wire() {
    const input = $("input");
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        send();
      }
    });
    input.addEventListener("input", autosize);
    input.addEventListener("paste", (e) => {
      if (!document.body.dataset.vision) return;
      for (const item of e.clipboardData.items) if (item.kind === "file") addImage(item.getAsFile());
    });
    $("send").addEventListener("click", send);
    $("stop").addEventListener("click", stop);
    $("attach").addEventListener("click", () => $("attach-input").click());
    $("attach-input").addEventListener("change", (e) => { for (const f of e.target.files) addImage(f); e.target.value = ""; });
    $("new-chat").addEventListener("click", () => { if (!state.streaming) { newConversation(); renderAll(); closePanels(); input.focus(); } });
    $("export-chat").addEventListener("click", () => { const c = conv(); if (c) download(`fp4lm-chat-${c.id}.json`, c); });
    $("export-all").addEventListener("click", () => download("fp4lm-conversations.json", state.convs));
    $("toggle-sidebar").addEventListener("click", () => togglePanel("sidebar"));
    $("toggle-engine").addEventListener("click", () => togglePanel("engine"));
    const closeAll = () => { document.body.classList.remove("sidebar-open", "engine-open"); syncScrim(); };
    $("scrim").addEventListener("click", closeAll);
    document.querySelectorAll(".panel-close").forEach((b) => b.addEventListener("click", closeAll));
    // The engine view is a column on wide screens and a slide-over on narrow ones: crossing the
    // breakpoint closes the slide-overs (or opens the column again).
    let narrow = window.matchMedia("(max-width: 900px)").matches;
    window.addEventListener("resize", () => {
      const now = window.matchMedia("(max-width: 900px)").matches;
      if (now !== narrow) {
        document.body.classList.remove("sidebar-open", "engine-open");
        if (!now && window.matchMedia("(min-width: 1200px)").matches) document.body.classList.add("engine-open");
        narrow = now;
      }
      syncScrim();
    });
    const dlg = $("settings");
    $("open-settings").addEventListener("click", () => { fillSettings(); dlg.showModal(); });
    $("settings-cancel").addEventListener("click", () => dlg.close());
    $("settings-reset").addEventListener("click", () => {
      for (const k of SAMPLING) $("set-" + k).value = "";
    });
    $("settings-form").addEventListener("submit", (e) => {
      e.preventDefault();
      readSettings();
      dlg.close();
    });
    // Copy buttons of code blocks (markdown.js writes them; one listener for all).
    $("messages").addEventListener("click", (e) => {
      const b = e.target.closest(".md-copy");
      if (!b) return;
      copy(b.closest(".md-code").querySelector("code").textContent);
      b.textContent = "Copied";
      setTimeout(() => { b.textContent = "Copy"; }, 1200);
    });
    if (window.matchMedia("(min-width: 1200px)").matches) {
      document.body.classList.add("engine-open");
      $("toggle-engine").setAttribute("aria-expanded", "true");
    }
  }

  // A reply that was streaming when the page closed stays as far as it got.
  for (const c of state.convs) {
    for (const m of c.messages) {
      if (m.pending) {
        delete m.pending;
        m.meta = "interrupted";
      }
    }
  }
  wire();
  renderAll();
  connect();
  // For tests and the curious: the state, the renderer, and the vision switch (set from /props;
  // the browser test turns it on to exercise image attachments before a vision model exists).
  window.fp4lm = { state, render: Markdown.render, applyVision };
})();
