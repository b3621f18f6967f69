#!/usr/bin/env python3
"""The README's screenshot of the chat page, taken from a real conversation.

Usage: webui_screenshot.py FP4LM_BIN MODEL_DIR OUT.png [--name NAME] [-- serve flags...]

Starts `fp4lm serve` on MODEL_DIR (127.0.0.1, a free port), opens its chat page in headless
chromium (Selenium from tests/webui/requirements.txt), asks the questions below one after the
other, waits for every reply to finish streaming, shows the engine view and saves a 1440x900
screenshot. Nothing on the page is staged: the replies are what the model generated (greedy, so a
rerun gives the same text). scripts/webui_screenshot.sh prepares the model and the venv.
"""
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

QUESTIONS = [
    "What is the capital of France?",
    "What is 2 + 2?",
]
# (A 135M model at 4 bits loops on open-ended requests such as a haiku: greedy, it repeats a phrase
# until the context ends. These two questions, one after the other, get whole answers.)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, cond, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return
        time.sleep(0.1)
    sys.exit(f"webui_screenshot: timed out waiting for {what}")


def main():
    args = sys.argv[1:]
    serve_flags = []
    if "--" in args:
        i = args.index("--")
        args, serve_flags = args[:i], args[i + 1:]
    name = "SmolLM2-135M-Instruct-NVFP4"
    if "--name" in args:
        i = args.index("--name")
        name = args[i + 1]
        del args[i:i + 2]
    if len(args) != 3:
        sys.exit(__doc__)
    fp4lm, model, out = args
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(Path(out).with_suffix(".serve.log"), "w")
    srv = subprocess.Popen([fp4lm, "serve", "--model", model, "--port", str(port), "--served-model-name", name,
                            *serve_flags], stdout=log, stderr=subprocess.STDOUT)

    def healthy():
        if srv.poll() is not None:
            sys.exit(f"webui_screenshot: fp4lm serve exited (log: {log.name})")
        try:
            return urllib.request.urlopen(url + "/health", timeout=2).status == 200
        except OSError:
            return False

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    driver = None
    try:
        wait_for("the server", healthy, 120)
        opts = webdriver.ChromeOptions()
        opts.binary_location = shutil.which("chromium")
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--window-size=1440,900", "--hide-scrollbars"):
            opts.add_argument(a)
        driver = webdriver.Chrome(options=opts, service=Service(executable_path=shutil.which("chromedriver")))
        driver.set_window_size(1440, 900)
        driver.get(url + "/")
        wait_for("the page", lambda: driver.find_elements(By.CSS_SELECTOR, "#input"), 30)
        # Greedy replies, so the screenshot is reproducible.
        driver.execute_script("localStorage.clear()")
        driver.get(url + "/")
        driver.find_element(By.CSS_SELECTOR, "#open-settings").click()
        wait_for("the settings", lambda: driver.execute_script("return document.getElementById('settings').open"), 5)
        t = driver.find_element(By.CSS_SELECTOR, "#set-temperature")
        t.clear()
        t.send_keys("0")
        driver.find_element(By.CSS_SELECTOR, "#settings-save").click()
        for n, q in enumerate(QUESTIONS, start=1):
            box = driver.find_element(By.CSS_SELECTOR, "#input")
            box.send_keys(q)
            box.send_keys(Keys.ENTER)

            def done():
                msgs = driver.execute_script(
                    "return (fp4lm.state.convs.find(c => c.id === fp4lm.state.current) || {messages: []}).messages")
                return (len(msgs) == 2 * n and "pending" not in msgs[-1]
                        and not driver.find_elements(By.CSS_SELECTOR, ".msg.streaming"))
            wait_for(f"reply {n}", done, 120)
        if not driver.find_element(By.CSS_SELECTOR, "#engine").is_displayed():  # shown by default when wide
            driver.find_element(By.CSS_SELECTOR, "#toggle-engine").click()
        time.sleep(2.5)  # a few polls into the plots
        driver.save_screenshot(out)
        msgs = driver.execute_script(
            "return fp4lm.state.convs.find(c => c.id === fp4lm.state.current).messages.map(m => [m.role, m.content])")
        for role, content in msgs:
            print(f"{role}: {content}")
        print(f"wrote {out}")
    finally:
        if driver is not None:
            driver.quit()
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=30)


if __name__ == "__main__":
    main()
