"""scripts/loadtest.py, small (N = 8, R = 2) against the tiny model: zero lost requests and greedy
outputs identical to single-request ones."""
import json
import subprocess
import sys

from conftest import REPO


def test_loadtest_8x2(server):
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "loadtest.py"), "--url", server.url,
                        "--concurrency", "8", "--rounds", "2", "--max-tokens", "24", "--check-greedy", "--json",
                        "--timeout", "120"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["requests"] == 16 and out["lost"] == 0
    assert out["generated_tokens"] == 16 * 24
    assert out["ttft_p50_ms"] > 0 and out["aggregate_tok_s"] > 0
