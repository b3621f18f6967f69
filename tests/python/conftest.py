"""Fixtures for the server tests: checkpoints written by `fp4lm synth` (plus a byte-level
tokenizer and a chat template), and `fp4lm serve` processes on free loopback ports, always
stopped with SIGTERM and checked to exit 0. Every wait is bounded."""
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
FP4LM = os.environ.get("FP4LM_BIN", str(REPO / "build" / "fp4lm"))
SHARED = Path(os.environ.get("FP4LM_SHARED_DIR", REPO.parent / "shared"))


def byte_char(b):
    """GPT-2's byte -> character rule (printable Latin-1 bytes stand for themselves)."""
    printable = lambda x: 0x21 <= x <= 0x7E or 0xA1 <= x <= 0xAC or x >= 0xAE
    if printable(b):
        return chr(b)
    return chr(256 + sum(1 for k in range(b) if not printable(k)))


CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def write_byte_tokenizer(d):
    """tokenizer.json whose ids 0..255 are the bytes themselves (a 256-entry vocabulary)."""
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": level, "post_processor": None, "decoder": level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": {byte_char(b): b for b in range(256)}, "merges": []},
    }
    (d / "tokenizer.json").write_text(json.dumps(tok))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))


def synth(out, *args):
    subprocess.run([FP4LM, "synth", "--out", str(out), *args], check=True, capture_output=True, timeout=120)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`fp4lm serve` on 127.0.0.1:<free port>."""

    def __init__(self, model, *args, log_dir, name="server"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(log_dir) / f"{name}-{self.port}.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [FP4LM, "serve", "--model", str(model), "--port", str(self.port), *args],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, f"fp4lm serve exited early:\n{self.log()}"
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"fp4lm serve not ready in 60 s:\n{self.log()}"
            time.sleep(0.05)

    def log(self):
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout=20):
        """SIGTERM; returns the exit code (the process is killed if it overstays)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        return self.proc.returncode

    def metrics(self):
        return httpx.get(self.url + "/metrics", timeout=10).text


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A small random NVFP4 Llama with the byte tokenizer and a chat template."""
    d = synth(tmp_path_factory.mktemp("models") / "tiny", "--arch", "LlamaForCausalLM", "--algo", "NVFP4")
    write_byte_tokenizer(d)
    return d


@pytest.fixture(scope="session")
def slow_model(tmp_path_factory):
    """A larger random model, slow enough per token that a client can abort mid-stream."""
    d = synth(tmp_path_factory.mktemp("models") / "slow", "--arch", "LlamaForCausalLM", "--algo", "NVFP4",
              "--hidden", "1024", "--layers", "8")
    write_byte_tokenizer(d)
    return d


@pytest.fixture(scope="session")
def logs(tmp_path_factory):
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="module")
def server(tiny_model, logs):
    s = Server(tiny_model, "--served-model-name", "tiny", "--max-num-seqs", "8", log_dir=logs)
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
