"""Fixtures for the Hub tests: a mock Hub (mock_hub.py) on 127.0.0.1 holding `org/tiny`, a random
model written by `fp4lm synth` split into two shards with an index, a byte-level tokenizer and chat
template, and files a run must never fetch (original/, *.gguf, *.bin, README.md); and `fp4lm` run
against it with a clean environment (no token, no proxy, its own cache)."""
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helpers"))
from mock_hub import MockHub  # noqa: E402
from synth_checkpoints import FP4LM, synth, write_byte_tokenizer  # noqa: E402

TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}<|assistant|>"
SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
NEEDED = {"config.json", "generation_config.json", "hf_quant_config.json", "tokenizer.json",
          "tokenizer_config.json", "model.safetensors.index.json", *SHARDS}


def split_safetensors(src, out_dir):
    """Writes src's tensors into two shards and model.safetensors.index.json (the HF layout)."""
    raw = Path(src).read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    names = sorted(k for k in header if k != "__metadata__")
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for shard, part in zip(SHARDS, halves):
        h, blob = {"__metadata__": {"format": "pt"}}, b""
        for k in part:
            a, b = header[k]["data_offsets"]
            h[k] = dict(header[k], data_offsets=[len(blob), len(blob) + b - a])
            blob += data[a:b]
            weight_map[k] = shard
        hb = json.dumps(h).encode()
        hb += b" " * (-len(hb) % 8)
        (out_dir / shard).write_bytes(struct.pack("<Q", len(hb)) + hb + blob)
    (out_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": len(data)}, "weight_map": weight_map}))


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """The model as a directory: what `org/tiny` holds, less the files no run needs."""
    d = tmp_path_factory.mktemp("tiny")
    whole = synth(tmp_path_factory.mktemp("synth"), "--layers", "2", "--hidden", "64", "--vocab", "256")
    for f in ("config.json", "generation_config.json", "hf_quant_config.json"):
        (d / f).write_bytes((whole / f).read_bytes())
    split_safetensors(whole / "model.safetensors", d)
    write_byte_tokenizer(d, TEMPLATE)
    return d


def repo_files(d):
    files = {p.name: p.read_bytes() for p in Path(d).iterdir()}
    files.update({"README.md": b"# tiny\n", "original/consolidated.00.pth": b"x" * 100,
                  "tiny-Q4_K_M.gguf": b"g" * 100, "pytorch_model.bin": b"b" * 100})
    return files


@pytest.fixture
def hub(tiny_dir):
    h = MockHub()
    h.add_repo("org/tiny", repo_files(tiny_dir))
    yield h
    h.close()


@pytest.fixture
def env(tmp_path, hub):
    """fp4lm's environment: the mock Hub, a fresh cache, no token, no proxy."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("HF_", "HUGGINGFACE_")) and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    e.update({"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path / "home"),
              "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", "FP4LM_LOG_LEVEL": "info"})
    return e


def fp4lm(env, *args, timeout=120):
    return subprocess.run([FP4LM, *args], env=env, capture_output=True, text=True, timeout=timeout)


def ok(r):
    assert r.returncode == 0, r.stderr
    return r
