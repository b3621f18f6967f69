"""The chat page of `fp4lm serve` in a real headless browser (Debian's chromium through
chromium-driver, driven by Selenium): two servers on a small random-weight model, one open and
one with --api-key, and one browser that checks what a person would see.

Usage: test_webui.py FP4LM_BIN ARTIFACT_DIR. Exit 0 when every check passed, 1 on the first
failure (its reason printed), 77 (ctest: skipped) without chromium / chromium-driver. Screenshots
go to ARTIFACT_DIR."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helpers"))

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
KEY = "webui-test-key"
MARKDOWN = ("Here is **bold text**, *italics* and `inline_code()`.\n\n"
            "- first item\n- second item\n- third item\n\n"
            "```python\ndef add(a, b):\n    return a < b\n```\n\n"
            "<img src=x onerror=\"document.body.dataset.pwned=1\"> stays text, and so does [a link](http://example.com).")
LONG_WORD = "x" * 600
# The renderer's rules (src/server/web/markdown.js), source -> HTML: escaped first, then the subset.
MARKDOWN_CASES = [
    ("**a** _b_ `c<d>`", "<p><strong>a</strong> <em>b</em> <code>c&lt;d&gt;</code></p>"),
    ("text <b>x</b> & \"q\"", "<p>text &lt;b&gt;x&lt;/b&gt; &amp; &quot;q&quot;</p>"),
    ("1. a\n2. b", "<ol><li>a</li><li>b</li></ol>"),
    ("- a\n  - b\n- c", "<ul><li>a<ul><li>b</li></ul></li><li>c</li></ul>"),
    ("[x](javascript:alert(1))", '<p>x <span class="md-url">(javascript:alert(1)</span>)</p>'),
    ("a\nb", "<p>a<br>b</p>"),
    ("# Title", "<h3>Title</h3>"),
    ("snake_case_word and 2 * 3 * 4", "<p>snake_case_word and 2 * 3 * 4</p>"),
    ("> quote **b**", "<blockquote><p>quote <strong>b</strong></p></blockquote>"),
    ("```py\nx = 1 < 2", '<div class="md-code"><div class="md-code-bar"><span>py</span><button type="button" '
     'class="md-copy" title="Copy code">Copy</button></div><pre><code>x = 1 &lt; 2</code></pre></div>'),
]


def log(msg):
    print(f"[{time.monotonic() - T0:5.1f} s] {msg}", flush=True)


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    log("ok: " + msg)


def wait_for(what, cond, timeout=20, every=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def http_get(url, key=None):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(server):
    out = {}
    for line in http_get(server.url + "/metrics", server.key).splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = out.get(name.split("{")[0], 0.0) + float(value)
    return out


class Server:
    """`fp4lm serve` on 127.0.0.1:<free port>, its log under the artifacts; stopped with SIGTERM."""

    def __init__(self, fp4lm, model, logs, *args, key=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = key
        self.log_path = Path(logs) / f"serve-{self.port}.log"
        self._log = open(self.log_path, "w")
        cmd = [fp4lm, "serve", "--model", str(model), "--port", str(self.port), "--served-model-name", "tiny", *args]
        if key:
            cmd += ["--api-key", key]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self):
        def ready():
            if self.proc.poll() is not None:
                fail(f"fp4lm serve exited early:\n{self.log_path.read_text()}")
            try:
                return urllib.request.urlopen(self.url + "/health", timeout=2).status == 200
            except OSError:
                return False
        wait_for(f"{self.url}/health", ready, timeout=60)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except Exception:
                self.proc.kill()
        self._log.close()
        return self.proc.returncode


def start_browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-default-apps", "--disable-extensions", "--window-size=1440,900", "--hide-scrollbars"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(executable_path=shutil.which("chromedriver")))


class Page:
    """The browser on one server's page, with its console and network seen through the logs."""

    def __init__(self, driver):
        self.d = driver
        self.requests = []  # (url, method, headers, postData)
        self.console = []

    def drain_logs(self):
        for e in self.d.get_log("performance"):
            m = json.loads(e["message"])["message"]
            if m["method"] == "Network.requestWillBeSent":
                r = m["params"]["request"]
                self.requests.append((r["url"], r["method"], r.get("headers", {}), r.get("postData")))
        self.console += self.d.get_log("browser")

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def css(self, sel):
        from selenium.webdriver.common.by import By
        return self.d.find_elements(By.CSS_SELECTOR, sel)

    def one(self, sel):
        els = self.css(sel)
        if not els:
            fail(f"no element {sel}")
        return els[0]

    def status(self):
        return self.one("#status").get_attribute("data-state")

    def type_and_enter(self, text):
        from selenium.webdriver.common.keys import Keys
        box = self.one("#input")
        box.clear()
        box.send_keys(text)
        box.send_keys(Keys.ENTER)

    def messages(self):
        return self.js("return (fp4lm.state.convs.find(c => c.id === fp4lm.state.current) || {messages: []}).messages")

    def wait_reply_done(self, n_messages, timeout=30):
        wait_for(f"{n_messages} messages, the last one finished",
                 lambda: len(self.messages()) == n_messages and "pending" not in self.messages()[-1]
                 and not self.css(".msg.streaming"), timeout)
        return self.messages()[-1]

    def chat_posts(self):
        self.drain_logs()
        return [r for r in self.requests if r[1] == "POST" and r[0].endswith("/v1/chat/completions")]

    def set_settings(self, **fields):
        self.one("#open-settings").click()
        wait_for("the settings dialog", lambda: self.js("return document.getElementById('settings').open"), 5)
        for k, v in fields.items():
            el = self.one(f"#set-{k}")
            el.clear()
            if v != "":
                el.send_keys(str(v))
        self.one("#settings-save").click()
        wait_for("the dialog to close", lambda: not self.js("return document.getElementById('settings').open"), 5)

    def no_horizontal_scroll(self, width):
        self.d.set_window_size(width, 900)
        wait_for(f"a {width} px viewport", lambda: self.js("return window.innerWidth") == width, 5)
        time.sleep(0.3)
        sizes = self.js("""return {doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,
            msgs: document.getElementById('messages').scrollWidth, msgsClient: document.getElementById('messages').clientWidth,
            inner: window.innerWidth,
            widest: Math.max(...[...document.querySelectorAll('.msg-body')].map(e => e.getBoundingClientRect().right)),
            overflowing: [...document.querySelectorAll('.msg-body, .md, .plain')].filter(e => e.scrollWidth > e.clientWidth + 1).length}""")
        check(sizes["doc"] <= sizes["inner"] and sizes["body"] <= sizes["inner"] and
              sizes["msgs"] <= sizes["msgsClient"] and sizes["widest"] <= sizes["inner"] and sizes["overflowing"] == 0,
              f"no horizontal scrolling at {width} px, long unbroken text wraps ({sizes})")


def make_model(fp4lm, root):
    from synth_checkpoints import synth, write_byte_tokenizer
    # Large enough that a long reply takes seconds (Stop acts mid-stream), small enough to write
    # in a few; no EOS, so a reply runs to max_tokens.
    d = synth(Path(root) / "model", "--arch", "LlamaForCausalLM", "--algo", "NVFP4", "--hidden", "512",
              "--layers", "4")
    write_byte_tokenizer(d, CHAT_TEMPLATE)
    config = json.loads((d / "config.json").read_text())
    config["eos_token_id"] = []
    config["max_position_embeddings"] = 8192  # room for a reply long enough to stop on any CPU
    (d / "config.json").write_text(json.dumps(config))
    (d / "generation_config.json").write_text(json.dumps({"temperature": 0.7, "top_k": 40, "eos_token_id": []}))
    return d


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    fp4lm, artifacts = sys.argv[1], Path(sys.argv[2])
    missing = [p for p in ("chromium", "chromedriver") if not shutil.which(p)]
    if missing:
        print(f"SKIP: {' and '.join(missing)} not installed (Debian: chromium chromium-driver; bash scripts/setup.sh)",
              file=sys.stderr)
        return 77
    os.environ["FP4LM_BIN"] = fp4lm
    artifacts.mkdir(parents=True, exist_ok=True)
    for old in [*artifacts.glob("*.png"), *artifacts.glob("*.log")]:
        old.unlink()
    tmp = tempfile.mkdtemp(prefix="fp4lm-webui-")
    servers, driver = [], None
    try:
        model = make_model(fp4lm, tmp)
        log("model written")
        open_srv = Server(fp4lm, model, artifacts)
        keyed = Server(fp4lm, model, artifacts, key=KEY)
        off = Server(fp4lm, model, artifacts, "--no-webui")
        off_alias = Server(fp4lm, model, artifacts, "--disable-web-ui")
        servers = [open_srv, keyed, off, off_alias]
        driver = start_browser()
        log("browser started")
        for s in servers:
            s.wait_ready()
        for s, flag in ((off, "--no-webui"), (off_alias, "--disable-web-ui")):
            try:
                http_get(s.url + "/")
                fail(f"{flag} still serves /")
            except urllib.error.HTTPError as e:
                check(e.code == 404, f"{flag}: / is a 404")
        run(Page(driver), open_srv, keyed, artifacts)
    finally:
        if driver:
            driver.quit()
        bad = 0
        for s in servers:
            rc = s.stop()
            if rc != 0:
                print(f"FAIL: fp4lm serve exited {rc} on SIGTERM:\n{s.log_path.read_text()}")
                bad += 1
        shutil.rmtree(tmp, ignore_errors=True)
        if bad:
            sys.exit(1)
    log("all checks passed")
    return 0


def run(p, srv, keyed, artifacts):
    # ---- load: no console error, no foreign request, what the conventions promise ------------
    p.d.get(srv.url + "/")
    wait_for("the page to connect", lambda: p.status() == "ready", 20)
    check(p.js("return document.querySelector('meta[name=viewport]').content") == "width=device-width",
          "viewport meta is width=device-width")
    check(p.one("#attach").get_attribute("hidden") is not None, "no attach button for a model without vision")
    check(p.one("#send").text == "Send" and p.one("#input").tag_name == "textarea", "a textarea and a Send button")

    # ---- a streamed reply ---------------------------------------------------------------------
    # Records the reply's text length at every change while it streams.
    p.js("""window.__lengths = []; new MutationObserver(() => {
              const m = document.querySelector('.msg.assistant.streaming .msg-body');
              if (m) window.__lengths.push(m.textContent.length);
            }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});""")
    # Long enough to span many animation frames (the page paints once per frame) even where the
    # model streams thousands of tokens a second.
    p.set_settings(max_tokens=1024)
    p.type_and_enter("Hello there")
    first = p.wait_reply_done(2)
    lengths = sorted(set(l for l in p.js("return window.__lengths") if l > 0))
    check(len(first["content"]) > 0 and "finish" in first["meta"], f"a reply arrived ({first['meta']})")
    check(len(lengths) >= 2, f"the reply was shown while it streamed ({len(lengths)} distinct partial lengths)")
    posts = p.chat_posts()
    body = json.loads(posts[-1][3])
    check(body["stream"] is True and body["messages"] == [{"role": "user", "content": "Hello there"}]
          and body["max_tokens"] == 1024 and body["model"] == "tiny",
          "the request is a same-origin streaming POST with the message and the settings")
    p.set_settings(max_tokens=64)

    # ---- a second turn carries the history -----------------------------------------------------
    p.type_and_enter("And a second question")
    p.wait_reply_done(4)
    body = json.loads(p.chat_posts()[-1][3])
    check(body["messages"] == [{"role": "user", "content": "Hello there"},
                               {"role": "assistant", "content": first["content"]},
                               {"role": "user", "content": "And a second question"}],
          "the second turn sends the whole history")

    # ---- regenerate and edit-and-resend ---------------------------------------------------------
    history = body["messages"]
    p.js("[...document.querySelectorAll('.msg.assistant .msg-action')].find(b => b.textContent === 'Regenerate').click()")
    wait_for("the regenerated request", lambda: len(p.chat_posts()) == 3, 10)
    p.wait_reply_done(4)
    check(json.loads(p.chat_posts()[-1][3])["messages"] == history,
          "Regenerate sends the same history again and replaces the last reply")
    p.js("document.querySelector('.msg.user .msg-action').click()")
    area = p.one(".edit-area")
    area.clear()
    area.send_keys("Hello, edited")
    p.one('[aria-label="Send edited message"]').click()
    wait_for("the edited request", lambda: len(p.chat_posts()) == 4, 10)
    p.wait_reply_done(2)
    check(json.loads(p.chat_posts()[-1][3])["messages"] == [{"role": "user", "content": "Hello, edited"}],
          "Edit cuts the conversation after the message and sends it again")

    # ---- stop cancels: the running gauge drops -------------------------------------------------
    p.one("#new-chat").click()
    p.set_settings(max_tokens=8000)
    m0 = metrics(srv)
    p.type_and_enter("A long answer please")
    wait_for("the request running on the server", lambda: metrics(srv)["vllm:num_requests_running"] == 1, 10, 0.02)
    saw_running = wait_for("the engine view to show 1 running request",
                           lambda: p.one('[data-metric="running"]').get_attribute("data-value") == "1", 5)
    check(saw_running, "the engine view plotted the running request")
    wait_for("the engine view to plot decoding", lambda: float(
        p.one('[data-metric="decode_tps"]').get_attribute("data-value") or 0) > 0, 5)
    log("ok: the engine view plotted the decode rate")
    p.one("#stop").click()
    wait_for("the running gauge to drop", lambda: metrics(srv)["vllm:num_requests_running"] == 0, 5, 0.02)
    stopped = p.wait_reply_done(2)
    m1 = metrics(srv)
    generated = m1["vllm:generation_tokens_total"] - m0["vllm:generation_tokens_total"]
    check("stopped" in stopped["meta"] and generated < 8000,
          f"Stop cancelled the request ({generated:.0f} of 8000 tokens; the gauge is back to 0)")

    # ---- the engine view shows what /metrics says ----------------------------------------------
    polls = int(p.one("#engine").get_attribute("data-polls"))
    wait_for("two more polls", lambda: int(p.one("#engine").get_attribute("data-polls")) >= polls + 2, 5)
    m = metrics(srv)
    view = p.js("""const o = {}; for (const f of document.querySelectorAll('#engine [data-metric]'))
                     o[f.dataset.metric] = Object.assign({}, f.dataset); return o;""")
    check(float(view["running"]["value"]) == m["vllm:num_requests_running"] == 0 and
          float(view["waiting"]["value"]) == m["vllm:num_requests_waiting"],
          "engine view: running and waiting requests match /metrics")
    check(abs(float(view["kv_cache"]["value"]) - 100 * m["vllm:kv_cache_usage_perc"]) < 1e-9,
          "engine view: KV-cache use matches /metrics")
    for sid, name in (("prompt_tps", "vllm:prompt_tokens_total"), ("decode_tps", "vllm:generation_tokens_total"),
                      ("prefix_hits", "vllm:prefix_cache_hits_total")):
        f = view[sid]
        check(float(f["total"]) == m[name], f"engine view: {sid} reads {name} = {m[name]:.0f}")
        rate = (float(f["total"]) - float(f["prevTotal"])) / float(f["dt"])
        check(abs(float(f["value"]) - rate) < 1e-6, f"engine view: {sid} plots the rate between its two readings")
    check(m["vllm:prefix_cache_hits_total"] > 0, "the second turn hit the prefix cache (the history was reused)")

    # ---- Markdown, escaped -----------------------------------------------------------------------
    for src, html in MARKDOWN_CASES:
        got = p.js("return fp4lm.render(arguments[0])", src)
        check(got == html, f"Markdown.render({src!r}) == {html!r}" + ("" if got == html else f" (got {got!r})"))
    conv = {"id": "md", "title": "Markdown", "created": 0, "messages": [
        {"role": "user", "content": "Show me Markdown. " + LONG_WORD},
        {"role": "assistant", "content": MARKDOWN, "reasoning": "Thinking about *lists*.", "meta": "stored",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}]}
    p.js("""const convs = JSON.parse(localStorage.getItem('fp4lm.conversations'));
            convs.unshift(arguments[0]); localStorage.setItem('fp4lm.conversations', JSON.stringify(convs));
            localStorage.setItem('fp4lm.current', JSON.stringify('md'));""", conv)
    p.drain_logs()
    p.d.refresh()
    wait_for("the page to connect again", lambda: p.status() == "ready", 20)
    md = p.one(".msg.assistant .md:not(.reasoning .md)")
    strong = md.find_elements("css selector", "strong")
    code = md.find_elements("css selector", "p code")
    items = md.find_elements("css selector", "ul > li")
    check(strong and strong[0].text == "bold text", "Markdown: **bold** is <strong>")
    font = code[0].value_of_css_property("font-family").lower() if code else ""
    check(code and code[0].text == "inline_code()" and ("mono" in font or "consolas" in font),
          f"Markdown: `code` is monospace ({font})")
    check([i.text for i in items] == ["first item", "second item", "third item"], "Markdown: list items")
    check(md.find_elements("css selector", "pre code")[0].text == "def add(a, b):\n    return a < b",
          "Markdown: a fenced code block, its < escaped")
    check(not p.css(".msg img") and p.js("return document.body.dataset.pwned") is None and "<img src=x" in md.text,
          "model output is never injected as HTML")
    check(p.one(".msg.assistant details.reasoning summary").text == "Reasoning", "reasoning in a <details> block")
    check("get_weather" in p.one(".tool-call").text and "Paris" in p.one(".tool-call").text, "tool calls shown")
    time.sleep(1.2)  # a poll or two into the plots
    for width in (1440, 390):
        p.no_horizontal_scroll(width)
        p.d.save_screenshot(str(artifacts / f"webui-{width}.png"))
    p.one("#toggle-engine").click()
    time.sleep(0.4)
    p.no_horizontal_scroll(390)
    p.d.save_screenshot(str(artifacts / "webui-390-engine.png"))
    p.d.set_window_size(1440, 900)

    # ---- conversations: export as JSON, delete ------------------------------------------------------
    p.js("""window.__exported = []; const make = URL.createObjectURL;
            URL.createObjectURL = (blob) => { blob.text().then(t => window.__exported.push(t)); return make(blob); };""")
    p.one("#export-chat").click()
    exported = wait_for("the exported JSON", lambda: p.js("return window.__exported[0]"), 5)
    check(json.loads(exported)["messages"][1]["content"] == MARKDOWN, "Export chat downloads the conversation as JSON")
    before = len(p.css("#conv-list li"))
    p.js("document.querySelector('#conv-list li.active .conv-del').click()")
    stored = p.js("return JSON.parse(localStorage.getItem('fp4lm.conversations')).map(c => c.id)")
    check(len(p.css("#conv-list li")) == before - 1 and "md" not in stored, "a deleted conversation leaves the list and the storage")

    # ---- no console errors and no foreign request on the open server ---------------------------
    p.drain_logs()
    errors = [e for e in p.console if e["level"] == "SEVERE"]
    check(not errors, f"no console errors ({errors})")
    foreign = [r[0] for r in p.requests if not (r[0].startswith(srv.url + "/") or r[0].startswith(("data:", "blob:")))]
    check(not foreign, f"no request to another origin ({len(p.requests)} requests, all to {srv.url})")

    # ---- the API key: 401 shown and named, then the key works ----------------------------------
    p.js("localStorage.clear()")
    p.d.get(keyed.url + "/")
    wait_for("the 401 error", lambda: p.one("#error").is_displayed(), 10)
    err = p.one("#error").text
    check("401" in err and "API key" in err, f"without the key the page says so: {err!r}")
    p.d.save_screenshot(str(artifacts / "webui-401.png"))
    p.set_settings(**{"api-key": "wrong-key"})
    wait_for("the refusal of a wrong key", lambda: "refused" in p.one("#error").text, 10)
    check(p.one("#set-api-key").get_attribute("type") == "password", "the key goes in a password input")
    p.set_settings(**{"api-key": KEY, "max_tokens": 8})
    wait_for("the page to connect with the key", lambda: p.status() == "ready", 10)
    check(not p.one("#error").is_displayed(), "with the right key the error is gone")
    p.type_and_enter("Hello with a key")
    reply = p.wait_reply_done(2)
    check("finish" in reply["meta"] and "error" not in reply, "a reply with the key")
    post = p.chat_posts()[-1]
    auth = {k.lower(): v for k, v in post[2].items()}.get("authorization")
    check(auth == f"Bearer {KEY}", "the key is sent as Authorization: Bearer")

    # ---- images: the attach path behind /props' vision flag -------------------------------------
    # The served model takes no images: the page is told it does, attaches a PNG as a data: URL
    # part, and shows the server's 400 (the model has no vision tower) as an error.
    png = Path(artifacts) / "pixel.png"
    png.write_bytes(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                                  "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a3c4f5e0"
                                  "0000000049454e44ae426082"))
    p.js("fp4lm.applyVision(true)")
    check(p.one("#attach").is_displayed(), "the attach button shows for a vision model")
    p.one("#attach-input").send_keys(str(png))
    wait_for("the attachment preview", lambda: p.css("#attachments img"), 5)
    n_posts = len(p.chat_posts())
    p.type_and_enter("What is in this image?")
    wait_for("the image request", lambda: len(p.chat_posts()) == n_posts + 1, 10)
    content = json.loads(p.chat_posts()[-1][3])["messages"][-1]["content"]
    check(content[0] == {"type": "text", "text": "What is in this image?"} and content[1]["type"] == "image_url"
          and content[1]["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo"),
          "an attached image is sent as an image_url part with a data: URL")
    wait_for("the server's refusal shown", lambda: p.one("#error").is_displayed(), 10)
    check("400" in p.one("#error").text and "no vision tower" in p.one("#error").text,
          f"the server's 400 is shown: {p.one('#error').text!r}")
    png.unlink()

    p.drain_logs()
    unexpected = [e for e in p.console if e["level"] == "SEVERE" and " 401 " not in e["message"]
                  and " 400 " not in e["message"]]
    check(not unexpected, f"no console errors besides the expected 401s and 400 ({unexpected})")
    foreign = [r[0] for r in p.requests if not (r[0].startswith((srv.url + "/", keyed.url + "/", "data:", "blob:")))]
    check(not foreign, "no request to another origin with the key either")
    p.d.save_screenshot(str(artifacts / "webui-api-key.png"))


if __name__ == "__main__":
    T0 = time.monotonic()
    sys.exit(main())
