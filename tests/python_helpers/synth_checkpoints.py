"""What both pytest suites (tests/server_http: the server; tests/python_package: the Python package) need
to make checkpoints: the repository's paths, `fp4lm synth`, and a byte-level tokenizer. Each
suite's conftest.py puts this folder on sys.path and imports from here."""
import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FP4LM = os.environ.get("FP4LM_BIN", str(REPO / "build" / "fp4lm"))
SHARED = Path(os.environ.get("FP4LM_SHARED_DIR", REPO.parent / "shared"))

# A random Llama large enough that one token takes a while: a client or a signal can act while
# it generates.
SLOW_LLAMA = ("--arch", "LlamaForCausalLM", "--algo", "NVFP4", "--hidden", "1024", "--layers", "8")


def synth(out, *args):
    """`fp4lm synth --out OUT ARGS...`; returns OUT."""
    subprocess.run([FP4LM, "synth", "--out", str(out), *args], check=True, capture_output=True, timeout=300)
    return out


def byte_char(b):
    """GPT-2's byte -> character rule (printable Latin-1 bytes stand for themselves)."""
    printable = lambda x: 0x21 <= x <= 0x7E or 0xA1 <= x <= 0xAC or x >= 0xAE
    if printable(b):
        return chr(b)
    return chr(256 + sum(1 for k in range(b) if not printable(k)))


def write_byte_tokenizer(d, chat_template=None):
    """tokenizer.json whose ids 0..255 are the bytes themselves (a 256-entry vocabulary); with
    `chat_template`, also a tokenizer_config.json that carries it."""
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": level, "post_processor": None, "decoder": level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": {byte_char(b): b for b in range(256)}, "merges": []},
    }
    (d / "tokenizer.json").write_text(json.dumps(tok))
    if chat_template is not None:
        (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": chat_template}))
