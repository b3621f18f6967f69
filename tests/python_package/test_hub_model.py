"""fp4lm.LLM(model="org/name"): a Hugging Face Hub id, downloaded from a mock Hub on 127.0.0.1
(tests/hub/mock_hub.py) into the shared Hub cache, gives the tokens the same files give as a
directory; revision, download_dir and tokenizer are honoured; a missing repo is a one-line error."""
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))
from mock_hub import MockHub  # noqa: E402

from conftest import synth, write_byte_tokenizer  # noqa: E402

import fp4lm  # noqa: E402


@pytest.fixture
def hub_env(tmp_path, monkeypatch):
    d = synth(tmp_path / "tiny", "--layers", "2")
    write_byte_tokenizer(d)
    hub = MockHub()
    hub.add_repo("org/tiny", {p.name: p.read_bytes() for p in d.iterdir()})
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    for k in ("HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(k, raising=False)
    yield hub, d, tmp_path
    hub.close()


def greedy_ids(llm):
    p = fp4lm.SamplingParams(max_tokens=6, temperature=0)
    return llm.generate([{"prompt_token_ids": [1, 2, 3]}], p, use_tqdm=False)[0].outputs[0].token_ids


def test_llm_loads_a_hub_id_like_its_directory(hub_env):
    hub, d, tmp = hub_env
    want = greedy_ids(fp4lm.LLM(str(d)))
    llm = fp4lm.LLM("org/tiny")
    assert greedy_ids(llm) == want
    assert llm.model_id == "org/tiny" and "org/tiny" in llm.model_source
    assert Path(llm.model).parent.parent.name == "models--org--tiny"
    # download_dir and revision (the commit main points at).
    commit = hub.repos["org/tiny"].refs["main"]
    llm = fp4lm.LLM("org/tiny", revision=commit, download_dir=str(tmp / "dd"), tokenizer="org/tiny")
    assert Path(llm.model) == tmp / "dd" / "models--org--tiny" / "snapshots" / commit
    assert llm.get_tokenizer().encode("hi") == [104, 105]


def test_llm_missing_repo_is_one_line(hub_env):
    with pytest.raises(RuntimeError, match=r"^org/missing: no such model repo at http://127\.0\.0\.1:\d+ "):
        fp4lm.LLM("org/missing")
