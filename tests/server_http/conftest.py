"""Fixtures for the server tests: checkpoints written by `fp4lm synth` (plus a byte-level
tokenizer and a chat template), and `fp4lm serve` processes on free loopback ports, always
stopped with SIGTERM and checked to exit 0. Every wait is bounded."""
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helpers"))
from synth_checkpoints import FP4LM, REPO, SHARED, SLOW_LLAMA, synth, write_byte_tokenizer  # noqa: E402,F401

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


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
    write_byte_tokenizer(d, CHAT_TEMPLATE)
    return d


@pytest.fixture(scope="session")
def slow_model(tmp_path_factory):
    """A larger random model, slow enough per token that a client can abort mid-stream."""
    d = synth(tmp_path_factory.mktemp("models") / "slow", *SLOW_LLAMA)
    write_byte_tokenizer(d, CHAT_TEMPLATE)
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
