"""Fixtures for the fp4lm Python package tests: checkpoints written by `fp4lm synth` (the
binary the ctest entry passes in FP4LM_BIN), the CLI to compare against, and log capture on
the "fp4lm" logger."""
import hashlib
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FP4LM = os.environ.get("FP4LM_BIN", str(REPO / "build" / "fp4lm"))
SHARED = Path(os.environ.get("FP4LM_SHARED_DIR", REPO.parent / "shared"))


def synth(out, *args):
    subprocess.run([FP4LM, "synth", "--out", str(out), *args], check=True, capture_output=True, timeout=300)
    return out


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


def byte_char(b):
    """GPT-2's byte -> character rule (printable Latin-1 bytes stand for themselves)."""
    printable = lambda x: 0x21 <= x <= 0x7E or 0xA1 <= x <= 0xAC or x >= 0xAE
    if printable(b):
        return chr(b)
    return chr(256 + sum(1 for k in range(b) if not printable(k)))


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
    return synth(tmp_path_factory.mktemp("models") / "slow", "--arch", "LlamaForCausalLM", "--algo", "NVFP4",
                 "--hidden", "1024", "--layers", "8")


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
