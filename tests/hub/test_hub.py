"""fp4lm with Hugging Face Hub ids against the mock Hub (mock_hub.py), and the cache it shares with
huggingface_hub (the official client, pinned in requirements.txt) both ways."""
import hashlib
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import FP4LM, NEEDED, SHARDS, fp4lm, ok

REPO_DIR = "models--org--tiny"
GEN = ("--prompt-ids", "1,2,3", "--max-tokens", "6", "--json")


def cache_of(env):
    return Path(env["HF_HUB_CACHE"])


def resolved_files(hub):
    """The files fp4lm asked the Hub for (GET resolve/...)."""
    return sorted(r["path"].split("/resolve/", 1)[1].split("/", 1)[1] for r in hub.requests("hub", "/resolve/")
                  if r["method"] == "GET")


def output_ids(r):
    return json.loads(r.stdout)["output_ids"]


def test_generate_hub_id_matches_directory_and_downloads_only_what_it_needs(hub, env, tiny_dir):
    from_dir = ok(fp4lm(env, "generate", "--model", str(tiny_dir), *GEN))
    from_hub = ok(fp4lm(env, "generate", "--model", "org/tiny", *GEN))
    assert output_ids(from_hub) == output_ids(from_dir)
    assert set(resolved_files(hub)) == NEEDED  # never original/, *.gguf, *.bin, README.md
    assert "downloaded from" in from_hub.stderr
    # LFS files came from the second origin (the CDN) after a 302.
    assert sorted(r["path"] for r in hub.requests("cdn")) == sorted(
        "/blobs/" + hashlib.sha256((tiny_dir / s).read_bytes()).hexdigest() for s in SHARDS)
    # A second run checks the revision and downloads nothing.
    hub.clear_log()
    again = ok(fp4lm(env, "generate", "--model", "org/tiny", *GEN))
    assert output_ids(again) == output_ids(from_dir)
    assert resolved_files(hub) == [] and hub.requests("cdn") == []
    assert [r["path"] for r in hub.requests("hub")] == ["/api/models/org/tiny/revision/main"]
    assert "nothing downloaded" in again.stderr


def test_cache_layout_is_huggingface_hubs(hub, env):
    from huggingface_hub import hf_hub_download, scan_cache_dir, snapshot_download
    snap = Path(ok(fp4lm(env, "download", "org/tiny")).stdout.strip())
    repo = cache_of(env) / REPO_DIR
    commit = hub.repos["org/tiny"].refs["main"]
    assert (repo / "refs" / "main").read_bytes() == commit.encode()  # no newline
    assert snap == repo / "snapshots" / commit
    for f in NEEDED:
        link = snap / f
        assert link.is_symlink() and os.readlink(link) == "../../blobs/" + os.path.basename(os.readlink(link))
    data = (snap / SHARDS[0]).read_bytes()
    assert os.readlink(snap / SHARDS[0]) == "../../blobs/" + hashlib.sha256(data).hexdigest()
    info = scan_cache_dir(cache_of(env))
    assert info.warnings == []
    (r,) = info.repos
    assert r.repo_id == "org/tiny" and r.nb_files == len(NEEDED) and set(r.refs) == {"main"}
    hub.clear_log()
    got = snapshot_download("org/tiny", cache_dir=cache_of(env), local_files_only=True)
    assert Path(got) == snap
    assert Path(hf_hub_download("org/tiny", "config.json", cache_dir=cache_of(env), local_files_only=True)).read_bytes() \
        == (snap / "config.json").read_bytes()
    assert hub.log == []


def test_runs_offline_from_a_cache_huggingface_hub_wrote(hub, env, tiny_dir):
    from huggingface_hub import snapshot_download
    snapshot_download("org/tiny", cache_dir=cache_of(env), endpoint=hub.url)
    want = output_ids(ok(fp4lm(env, "generate", "--model", str(tiny_dir), *GEN)))
    hub.clear_log()
    off = ok(fp4lm(dict(env, HF_HUB_OFFLINE="1"), "generate", "--model", "org/tiny", *GEN))
    assert output_ids(off) == want and hub.log == []
    assert "HF_HUB_OFFLINE=1" in off.stderr
    # Online: the revision check finds every blob huggingface_hub wrote (same ETag names).
    on = ok(fp4lm(env, "generate", "--model", "org/tiny", *GEN))
    assert output_ids(on) == want and resolved_files(hub) == []


def test_cut_download_resumes_with_range_and_verifies(hub, env, tiny_dir):
    hub.cut[SHARDS[0]] = 1000
    ok(fp4lm(env, "download", "org/tiny"))
    ranges = [r["headers"].get("Range") for r in hub.requests("cdn")]
    assert "bytes=1000-" in ranges
    blob = hashlib.sha256((tiny_dir / SHARDS[0]).read_bytes()).hexdigest()
    assert (cache_of(env) / REPO_DIR / "blobs" / blob).read_bytes() == (tiny_dir / SHARDS[0]).read_bytes()


def test_incomplete_file_of_an_earlier_run_is_resumed(hub, env, tiny_dir):
    data = (tiny_dir / SHARDS[1]).read_bytes()
    blobs = cache_of(env) / REPO_DIR / "blobs"
    blobs.mkdir(parents=True)
    sha = hashlib.sha256(data).hexdigest()
    (blobs / (sha + ".incomplete")).write_bytes(data[:5000])
    ok(fp4lm(env, "download", "org/tiny"))
    assert [r["headers"].get("Range") for r in hub.requests("cdn") if sha in r["path"]] == ["bytes=5000-"]
    assert (blobs / sha).read_bytes() == data and not (blobs / (sha + ".incomplete")).exists()


def test_two_processes_download_each_blob_once(hub, env):
    for s in SHARDS:
        hub.slow[s] = 1.0
    procs = [subprocess.Popen([FP4LM, "download", "org/tiny"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert outs[0][0] == outs[1][0]  # the same snapshot
    fetched = [r["path"] for r in hub.requests("cdn")] + resolved_files(hub)
    assert sorted(fetched) == sorted(set(fetched)) and len(hub.requests("cdn")) == len(SHARDS)
    assert any("another process is downloading it" in err for _, err in outs)


def test_tampered_file_is_refused_and_nothing_looks_complete(hub, env, tiny_dir):
    hub.tamper.add(SHARDS[1])
    r = fp4lm(env, "generate", "--model", "org/tiny", *GEN)
    assert r.returncode == 1
    (line,) = [l for l in r.stderr.splitlines() if l.startswith("fp4lm: error")]
    assert "checksum mismatch" in line and SHARDS[1] in line and "sha256" in line
    repo = cache_of(env) / REPO_DIR
    sha = hashlib.sha256((tiny_dir / SHARDS[1]).read_bytes()).hexdigest()
    assert not (repo / "blobs" / sha).exists() and not (repo / "blobs" / (sha + ".incomplete")).exists()
    assert not (repo / "refs" / "main").exists()
    assert not any((repo / "snapshots").glob("*/" + SHARDS[1]))


def test_gated_repo_needs_a_token_sent_only_to_the_hub(hub, env, tiny_dir, tmp_path):
    hub.repos["org/tiny"].gated = True
    r = fp4lm(env, "download", "org/tiny")
    assert r.returncode == 1
    assert "org/tiny is a gated repo" in r.stderr and "HF_TOKEN" in r.stderr
    hub.known_tokens.update({"hf_noaccess", "hf_secret"})
    hub.tokens_with_access.add("hf_secret")
    r = fp4lm(dict(env, HF_TOKEN="hf_noaccess"), "download", "org/tiny")
    assert r.returncode == 1 and "has no access" in r.stderr and "hf_noaccess" not in r.stderr
    hub.clear_log()
    r = ok(fp4lm(dict(env, HF_TOKEN="hf_secret", FP4LM_LOG_LEVEL="debug"), "download", "org/tiny"))
    assert "hf_secret" not in r.stderr + r.stdout
    assert all(q["headers"].get("Authorization") == "Bearer hf_secret" for q in hub.requests("hub"))
    assert hub.requests("cdn") and all("Authorization" not in q["headers"] for q in hub.requests("cdn"))
    # The token file under HF_HOME, as `hf auth login` writes it.
    home = tmp_path / "hfhome"
    home.mkdir()
    (home / "token").write_text("hf_secret\n")
    ok(fp4lm(dict(env, HF_HOME=str(home), HF_HUB_CACHE=str(tmp_path / "c2")), "download", "org/tiny"))


def test_revision_branch_and_commit(hub, env, tiny_dir):
    files = dict(hub.repos["org/tiny"].commits[hub.repos["org/tiny"].refs["main"]])
    files["generation_config.json"] = b'{"temperature": 0.5}'
    v2 = hub.repos["org/tiny"].add_commit("v2", files)
    snap = Path(ok(fp4lm(env, "download", "org/tiny", "--revision", "v2")).stdout.strip())
    assert snap.name == v2 and (snap / "generation_config.json").read_bytes() == files["generation_config.json"]
    assert (cache_of(env) / REPO_DIR / "refs" / "v2").read_text() == v2
    main = hub.repos["org/tiny"].refs["main"]
    r = ok(fp4lm(env, "generate", "--model", "org/tiny", "--revision", main, *GEN))
    assert main in r.stderr
    # A complete snapshot of a commit needs no request.
    hub.clear_log()
    ok(fp4lm(env, "generate", "--model", "org/tiny", "--revision", main, *GEN))
    assert hub.log == []
    r = fp4lm(env, "generate", "--model", "org/tiny", "--revision", "nope", *GEN)
    assert r.returncode == 1 and "no revision 'nope'" in r.stderr


def test_missing_repo_offline_uncached_and_unreachable(hub, env):
    r = fp4lm(env, "generate", "--model", "org/nothing", *GEN)
    assert r.returncode == 1 and "org/nothing: no such model repo" in r.stderr
    hub.add_repo("org/binonly", {"config.json": b"{}", "pytorch_model.bin": b"x", "m.gguf": b"y"})
    r = fp4lm(env, "generate", "--model", "org/binonly", *GEN)
    assert r.returncode == 1 and "org/binonly: no model.safetensors or model.safetensors.index.json" in r.stderr
    assert "m.gguf, pytorch_model.bin" in r.stderr and not resolved_files(hub)
    hub.clear_log()
    r = fp4lm(dict(env, HF_HUB_OFFLINE="1"), "generate", "--model", "org/tiny", *GEN)
    assert r.returncode == 1 and "org/tiny" in r.stderr and "offline" in r.stderr and hub.log == []
    # The Hub unreachable: the cache with a warning, or a clear error when nothing is cached.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    r = fp4lm(dict(env, HF_ENDPOINT=dead), "download", "org/tiny")
    assert r.returncode == 1 and "unreachable" in r.stderr and "org/tiny" in r.stderr
    ok(fp4lm(env, "download", "org/tiny"))
    r = ok(fp4lm(dict(env, HF_ENDPOINT=dead), "generate", "--model", "org/tiny", *GEN))
    assert "the Hub is unreachable" in r.stderr and "using the cached snapshot" in r.stderr


def test_cache_directories_hf_home_download_dir(hub, env, tmp_path):
    e = dict(env)
    del e["HF_HUB_CACHE"]
    e["HF_HOME"] = str(tmp_path / "hfhome")
    ok(fp4lm(e, "download", "org/tiny"))
    assert (tmp_path / "hfhome" / "hub" / REPO_DIR / "refs" / "main").exists()
    e = dict(env, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    del e["HF_HUB_CACHE"]
    ok(fp4lm(e, "download", "org/tiny"))
    assert (tmp_path / "xdg" / "huggingface" / "hub" / REPO_DIR).is_dir()
    r = ok(fp4lm(env, "generate", "--model", "org/tiny", "--download-dir", str(tmp_path / "dd"), *GEN))
    assert (tmp_path / "dd" / REPO_DIR / "refs" / "main").exists() and not cache_of(env).exists()


def test_disk_full_says_needed_and_free(hub, env):
    hub.fake_size[SHARDS[0]] = 1 << 60
    r = fp4lm(env, "download", "org/tiny")
    assert r.returncode == 1
    assert "not enough disk space" in r.stderr and "1024.0 PiB" in r.stderr and "free" in r.stderr


def test_include_and_tree_listing(hub, env):
    hub.siblings_without_blobs = True  # sizes and hashes from the paginated tree listing
    hub.page_size = 2
    snap = Path(ok(fp4lm(env, "download", "org/tiny", "--include", "*.json")).stdout.strip())
    assert sorted(p.name for p in snap.iterdir()) == sorted(f for f in NEEDED if f.endswith(".json"))
    assert len(hub.requests("hub", "/tree/")) > 2


def test_inspect_says_where_files_came_from(hub, env):
    r = ok(fp4lm(env, "inspect", "--model", "org/tiny", "--json"))
    src = json.loads(r.stdout)["source"]
    assert src["kind"] == "hub" and src["repo_id"] == "org/tiny" and src["commit"] == hub.repos["org/tiny"].refs["main"]
    r = ok(fp4lm(env, "inspect", "--model", "org/tiny"))
    assert any(l.startswith("source") and "org/tiny" in l and "nothing downloaded" in l for l in r.stdout.splitlines())


@pytest.mark.parametrize("model_args", [["--model", "org/tiny"], ["org/tiny"]])
def test_serve_names_the_model_by_its_id(hub, env, model_args, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # `fp4lm serve --model ID`, or `fp4lm serve ID` as `vllm serve ID`.
    log = open(tmp_path / "serve.log", "w")
    p = subprocess.Popen([FP4LM, "serve", *model_args, "--port", str(port)], env=env,
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as resp:
                    models = json.load(resp)
                break
            except OSError:
                assert p.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.2)
        assert [m["id"] for m in models["data"]] == ["org/tiny"]
    finally:
        p.terminate()
        p.wait(timeout=30)
    log.close()
    assert p.returncode == 0, (tmp_path / "serve.log").read_text()


def test_serve_model_given_twice_or_not_at_all(env):
    r = fp4lm(env, "serve", "org/a", "--model", "org/b")
    assert r.returncode == 2 and "the model is given twice: 'org/a' and --model 'org/b'" in r.stderr
    r = fp4lm(env, "serve")
    assert r.returncode == 2 and "--model is required" in r.stderr


def test_tokenizer_commands_fetch_only_tokenizer_files(hub, env, tiny_dir):
    r = ok(fp4lm(env, "tokenize", "--model", "org/tiny", "--text", "hi"))
    assert r.stdout.strip() == "104,105"
    assert set(resolved_files(hub)) == {"tokenizer.json", "tokenizer_config.json"}
    # generate --tokenizer ID: the tokenizer from another repo (tokenizer files only).
    hub.add_repo("org/tok", {f: (tiny_dir / f).read_bytes() for f in ("tokenizer.json", "tokenizer_config.json")})
    hub.clear_log()
    r = ok(fp4lm(env, "generate", "--model", str(tiny_dir), "--tokenizer", "org/tok", "--prompt", "hi",
                 "--max-tokens", "2", "--json"))
    assert json.loads(r.stdout)["prompt_ids"] == [104, 105]
    assert set(resolved_files(hub)) == {"tokenizer.json", "tokenizer_config.json"}
    assert all("/org/tiny/" not in q["path"] for q in hub.requests("hub"))  # --model is a directory


def test_serve_stops_at_once_during_a_download(hub, env):
    hub.slow[SHARDS[0]] = hub.slow[SHARDS[1]] = 20
    p = subprocess.Popen([FP4LM, "serve", "org/tiny", "--port", "0"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not hub.requests("cdn"):
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    t0 = time.monotonic()
    p.terminate()
    p.wait(timeout=10)
    assert p.returncode == -15 and time.monotonic() - t0 < 5
