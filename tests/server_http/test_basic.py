"""Endpoints other than generation (after llama.cpp's server tests: basic, tokenize)."""
import httpx


def test_health_models_version(server):
    r = httpx.get(server.url + "/health")
    assert r.status_code == 200
    models = httpx.get(server.url + "/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert models["data"][0]["max_model_len"] == 512
    assert models["data"][0]["object"] == "model"
    assert httpx.get(server.url + "/version").json()["version"]


def test_models_through_the_openai_client(client):
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_unknown_path_is_a_404_error_object(server):
    r = httpx.get(server.url + "/v1/nothing")
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["type"] == "NotFoundError" and err["code"] == 404 and "/v1/nothing" in err["message"]


def test_bad_json_is_a_400(server):
    r = httpx.post(server.url + "/v1/completions", content=b"{nope", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "BadRequestError"


def test_tokenize_detokenize_round_trip(server):
    text = "Hello, wörld!"
    r = httpx.post(server.url + "/tokenize", json={"prompt": text, "add_special_tokens": False}).json()
    assert r["tokens"] == list(text.encode())  # the byte tokenizer: one id per byte
    assert r["count"] == len(text.encode()) and r["max_model_len"] == 512
    back = httpx.post(server.url + "/detokenize", json={"tokens": r["tokens"]}).json()
    assert back["prompt"] == text
    with_strs = httpx.post(server.url + "/tokenize", json={"prompt": "ab", "return_token_strs": True}).json()
    assert with_strs["token_strs"] == ["a", "b"]


def test_tokenize_chat_messages_applies_the_template(server):
    msgs = [{"role": "user", "content": "hi"}]
    r = httpx.post(server.url + "/tokenize", json={"messages": msgs}).json()
    assert bytes(r["tokens"]).decode() == "<|user|>hi\n<|assistant|>"


def test_tokenize_errors(server):
    assert httpx.post(server.url + "/tokenize", json={"prompt": 5}).status_code == 400
    assert httpx.post(server.url + "/detokenize", json={"tokens": [1, 99999]}).status_code == 400
    assert httpx.post(server.url + "/tokenize", json={"prompt": "x", "model": "nope"}).status_code == 404


def test_one_access_log_line_per_request(server):
    httpx.get(server.url + "/v1/models")
    httpx.post(server.url + "/v1/completions", json={"prompt": "ab", "max_tokens": 3, "temperature": 0,
                                                     "ignore_eos": True})
    log = server.log()
    assert '"GET /v1/models" 200' in log
    assert '"POST /v1/completions" 200 prompt_tokens=2 completion_tokens=3' in log


def test_llama_server_paths_without_v1(server):
    # llama-server answers /chat/completions, /completions, /models and /v1/health too; its test
    # suite and clients use them (scripts/third_party_server_suites.sh found the 404s).
    assert httpx.get(server.url + "/v1/health").status_code == 200
    assert [m["id"] for m in httpx.get(server.url + "/models").json()["data"]] == ["tiny"]
    body = {"max_tokens": 2, "temperature": 0, "ignore_eos": True}
    chat = httpx.post(server.url + "/chat/completions", json={**body, "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 200 and chat.json()["object"] == "chat.completion"
    assert chat.json()["usage"]["completion_tokens"] == 2
    done = httpx.post(server.url + "/completions", json={**body, "prompt": "Once"})
    assert done.status_code == 200 and done.json()["object"] == "text_completion"
    v1 = httpx.post(server.url + "/v1/completions", json={**body, "prompt": "Once"}).json()
    assert done.json()["choices"][0]["text"] == v1["choices"][0]["text"]
