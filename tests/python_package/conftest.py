"""Fixtures for the fp4lm Python package tests: checkpoints written by `fp4lm synth` (the
binary the ctest entry passes in FP4LM_BIN), the CLI to compare against, and log capture on
the "fp4lm" logger."""
import hashlib
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helpers"))
from synth_checkpoints import FP4LM, REPO, SHARED, SLOW_LLAMA, synth, write_byte_tokenizer  # noqa: E402,F401


def cli(*args, check=True):
    """Runs the fp4lm CLI; returns the CompletedProcess (text mode)."""
    r = subprocess.run([FP4LM, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def cli_log_lines(stderr):
    """The CLI's log lines without their 'I 12:34:56.789 ' prefix."""
    lines = []
    for line in stderr.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and len(parts[0]) == 1:
            lines.append(parts[2])
    return lines


def tree_digest(d):
    """name -> sha256 of every file under d (to prove a load leaves the checkpoint unchanged)."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(d).rglob("*")) if p.is_file()}


class LogCapture(logging.Handler):
    """Collects the messages of the "fp4lm" logger."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def fp4lm_log():
    logger = logging.getLogger("fp4lm")
    h = LogCapture()
    logger.addHandler(h)
    yield h
    logger.removeHandler(h)


@pytest.fixture(scope="session")
def moe_w4a4(tmp_path_factory):
    """The seed's case: a small random W4A4 NVFP4 Qwen3-MoE checkpoint with a byte tokenizer."""
    d = synth(tmp_path_factory.mktemp("models") / "qwen3moe-nvfp4", "--arch", "Qwen3MoeForCausalLM",
              "--algo", "NVFP4")
    write_byte_tokenizer(d)
    return d


@pytest.fixture(scope="session")
def slow_model(tmp_path_factory):
    """A larger random model, slow enough per step that a signal lands mid-generate."""
    return synth(tmp_path_factory.mktemp("models") / "slow", *SLOW_LLAMA)


@pytest.fixture(scope="session")
def qwen3_chat_model(tmp_path_factory):
    """A random Qwen3 with the real Qwen3 tokenizer and chat template (../shared/tokenizers/qwen3)."""
    tok = SHARED / "tokenizers" / "qwen3"
    if not (tok / "tokenizer.json").exists():
        pytest.skip(f"{tok} is absent")
    d = synth(tmp_path_factory.mktemp("models") / "qwen3-chat", "--arch", "Qwen3ForCausalLM", "--algo", "NVFP4",
              "--vocab", "151936")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok / name, d / name)
    return d
