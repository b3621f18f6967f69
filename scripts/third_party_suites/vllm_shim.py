"""pytest plugin: runs vLLM's tests/entrypoints/openai bodies against `fp4lm serve`.

vLLM's test files import vLLM (and torch) for helpers around the HTTP calls; this shim stands in
for those imports so that only the HTTP conversation with the server is tested:
- `tests.utils.RemoteOpenAIServer(model, args)` starts `fp4lm serve $FP4LM_SUITE_MODEL
  --served-model-name MODEL` on a free port, passing on the vLLM flags fp4lm serve knows
  (the others are printed and dropped);
- `vllm.tokenizers.get_tokenizer` reads the served checkpoint's tokenizer.json (`tokenizers`);
- `vllm.config.ModelConfig` answers get_vocab_size() from the checkpoint's config.json;
- every other `vllm.*` / `torch` name is a MagicMock (tests that need the real object fail and
  are counted as not applicable in docs/SERVER_SUITES.md).
Environment: FP4LM_BIN (the fp4lm binary), FP4LM_SUITE_MODEL (checkpoint directory).
"""
import importlib.abc
import importlib.machinery
import json
import os
import re
import socket
import subprocess
import sys
import time
import types
from unittest.mock import MagicMock

import openai
import requests

FP4LM = os.environ.get("FP4LM_BIN", "fp4lm")
MODEL_DIR = os.environ["FP4LM_SUITE_MODEL"]


def _serve_options():
    out = subprocess.run([FP4LM, "serve", "--help"], capture_output=True, text=True).stdout
    return {m.group(1): m.group(2) is not None
            for m in re.finditer(r"^\s+(--[\w.-]+)(?:,--[\w.-]+)*(\s+[A-Z]+)?", out, re.M)}


class RemoteOpenAIServer:
    DUMMY_API_KEY = "token-abc123"

    def __init__(self, model, vllm_serve_args, *, env_dict=None, seed=0, auto_port=True,
                 max_wait_seconds=None, override_hf_configs=None, **kwargs):
        known = _serve_options()
        args, dropped, i = [], [], 0
        vllm_serve_args = list(vllm_serve_args)
        while i < len(vllm_serve_args):
            a = vllm_serve_args[i]
            name = a.split("=", 1)[0]
            takes = known.get(name)
            has_value = "=" not in a and i + 1 < len(vllm_serve_args) and \
                not str(vllm_serve_args[i + 1]).startswith("--")
            group = [a] + ([vllm_serve_args[i + 1]] if has_value else [])
            i += len(group)
            if name in ("--port", "--host", "--served-model-name", "--model") or takes is None:
                dropped += group
            else:
                args += group
        if dropped:
            print(f"[fp4lm shim] vLLM flags not passed to fp4lm serve: {dropped}", file=sys.stderr)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.host = "127.0.0.1"
        self.model = model
        cmd = [FP4LM, "serve", MODEL_DIR, "--served-model-name", model, "--port", str(self.port),
               "--log-level", "warn"] + [str(x) for x in args]
        self.log = open(os.path.join(os.environ.get("FP4LM_SUITE_LOGS", "/tmp"),
                                     f"fp4lm-serve-{self.port}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env_dict or {})})
        deadline = time.time() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fp4lm serve exited {self.proc.returncode}: {cmd}")
            try:
                if requests.get(self.url_for("health"), timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.time() > deadline:
                raise RuntimeError("fp4lm serve did not become healthy")
            time.sleep(0.2)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

    @property
    def url_root(self):
        return f"http://{self.host}:{self.port}"

    def url_for(self, *parts):
        return self.url_root + "/" + "/".join(parts)

    def get_client(self, **kw):
        kw.setdefault("timeout", 600)
        return openai.OpenAI(base_url=self.url_for("v1"), api_key=self.DUMMY_API_KEY, max_retries=0, **kw)

    def get_async_client(self, **kw):
        kw.setdefault("timeout", 600)
        return openai.AsyncOpenAI(base_url=self.url_for("v1"), api_key=self.DUMMY_API_KEY,
                                  max_retries=0, **kw)


class _Tokenizer:
    def __init__(self):
        from tokenizers import Tokenizer
        self.tok = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
        cfg = json.load(open(os.path.join(MODEL_DIR, "config.json")))
        self.eos_token_id = cfg.get("eos_token_id")
        self.vocab_size = self.tok.get_vocab_size()

    def encode(self, text, add_special_tokens=True, **kw):
        return self.tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens=False, **kw):
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids):
        return [self.tok.id_to_token(i) for i in ids]

    def __call__(self, text, add_special_tokens=True, **kw):
        return types.SimpleNamespace(input_ids=self.encode(text, add_special_tokens))

    def __len__(self):
        return self.vocab_size


class _ModelConfig:
    def __init__(self, model=None, **kw):
        self.cfg = json.load(open(os.path.join(MODEL_DIR, "config.json")))
        self.model = model

    def get_vocab_size(self):
        return self.cfg["vocab_size"]


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = MagicMock(name=f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    ROOTS = ("vllm", "torch", "transformers")

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.ROOTS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        if module.__name__ == "vllm.tokenizers":
            module.get_tokenizer = lambda *a, **k: _Tokenizer()
        if module.__name__ == "vllm.config":
            module.ModelConfig = _ModelConfig


sys.meta_path.insert(0, _StubFinder())
_utils = types.ModuleType("tests.utils")
_utils.RemoteOpenAIServer = RemoteOpenAIServer
sys.modules["tests.utils"] = _utils
