#!/usr/bin/env python3
"""Writes tests/tokenizer/fixtures/gemma/: a Gemma-style tokenizer and what Hugging Face
`tokenizers` and Jinja2 make of it, for tests/tokenizer/gemma_golden_test.cpp.

  python3 -m venv .venv-tok && .venv-tok/bin/pip install -r scripts/requirements-tokenizer-goldens.txt
  .venv-tok/bin/python scripts/make_gemma_tokenizer_goldens.py

Files written (the three chat templates beside them are Google's, see README there):
  tokenizer.json         a small BPE trained here by `tokenizers` on a fixed text, laid out as
                         Gemma 3 / Gemma 4 ship theirs: byte fallback (<0x00>..<0xFF> in the
                         vocabulary), fuse_unk, no pre-tokenizer (merges may cross spaces), a
                         Replace(" " -> "▁") normalizer, decoder Replace("▁" -> " ") + ByteFallback
                         + Fuse, post-processor "<bos> $A"; Gemma's special tokens (<pad> <eos>
                         <bos> <unk> <mask>, <start_of_turn> <end_of_turn> <start_of_image>, Gemma 4's
                         <|turn> <turn|> <|think|> <|channel> <channel|> <|tool> <tool|> <|tool_call>
                         <tool_call|> <|tool_response> <tool_response|> <|"|> <|image|> <|audio|>
                         <|video|>) and three non-special added tokens.
  tokenizer_config.json  bos/eos tokens and add_bos_token, as Gemma's.
  golden_tokenize.jsonl  {"text", "ids", "ids_special", "decoded", "decoded_skip"} per text:
                         `tokenizers` encode with and without add_special_tokens, decode of
                         ids_special with and without skip_special_tokens; then {"ids", "decoded",
                         "decoded_skip"} for hand-picked id lists (byte tokens that are not valid
                         UTF-8, lone specials, ▁ runs).
  golden_chat.jsonl      {"template", "name", "messages", "tools", "kwargs", "add_generation_prompt",
                         "prompt" | "error", "ids"}: the template rendered by Jinja2 in the
                         environment transformers' apply_chat_template uses (sandboxed, trim_blocks,
                         lstrip_blocks, loopcontrols, its tojson / raise_exception), and `tokenizers`'
                         encode of the prompt (add_special_tokens false: the template writes <bos>).
When transformers is importable (e.g. the validation venv, same tokenizers / Jinja2 pins), every
prompt is also rendered by its own render_jinja_template and must be equal.
"""
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox
from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tokenizer", "fixtures", "gemma")

SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
           "<end_of_image>", "<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>", "<|tool>", "<tool|>",
           "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>', "<|image|>",
           "<|audio|>", "<|video|>"]
PLAIN_ADDED = ["<table>", "</table>", "\t\t"]  # added tokens that are not special (normalized: false)

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
    "Hello world! Hello there, how are you doing today? I am fine, thank you.",
    "def main():\n    return sum(x * x for x in range(10))\n\nif __name__ == '__main__':\n    main()\n",
    "    indented line\n        more indented\n\n\nthree newlines above",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14159 2026-12-02",
    "Café, naïve, résumé, über, señor, crème brûlée.",
    "User: What is the weather in Paris?\nModel: It is sunny and 21 degrees.",
    "a  b   c    d     e      f",
    "Gemma models are lightweight, state-of-the-art open models.",
    "The model thinks, then answers. The answer is short.",
] * 20


def build_tokenizer():
    """Trains the BPE, then lays the vocabulary out as Gemma's: special tokens first, the 256 byte
    tokens next, then the learned pieces (merges unchanged)."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=SPECIAL, show_progress=False, min_frequency=2)
    tok.train_from_iterator(CORPUS, trainer)
    j = json.loads(tok.to_str())
    learned = [t for t, _ in sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1]) if t not in SPECIAL]
    pieces = SPECIAL + [f"<0x{b:02X}>" for b in range(256)] + learned + PLAIN_ADDED
    vocab = {t: i for i, t in enumerate(pieces)}
    j["model"]["vocab"] = {t: i for t, i in vocab.items() if t not in PLAIN_ADDED}
    j["added_tokens"] = [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": t in SPECIAL} for t in SPECIAL + PLAIN_ADDED]
    j["pre_tokenizer"] = None
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    bos = vocab["<bos>"]
    j["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<bos>": {"id": "<bos>", "ids": [bos], "tokens": ["<bos>"]}}}
    text = json.dumps(j, ensure_ascii=False, indent=1)
    return Tokenizer.from_str(text), text


TEXTS = [
    "", " ", "  ", "Hello world", " Hello world", "Hello world ", "Hello  world", "hello\nworld", "a\n\n\nb",
    "\tTabbed\t\tline", "The quick brown fox jumps over the lazy dog.", "Café crème brûlée, naïve señor.",
    "日本語のテキスト", "emoji 🙂 and 👩‍💻 here", "mixed é日🙂x", "zzzz qqqq", "Ünïcödé", "\u00a0non-breaking",
    "x" * 40, "▁already▁metaspace", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<bos><|turn>system\n<|think|>Be brief.<turn|>\n", 'call:f{a:<|"|>b<|"|>}', "<table>row</table>",
    "not <special> tokens <eos", "<eos><eos>", "<0x41> is text, not a byte token", "def f():\n    return 1\n",
    "Numbers 3.14159 and 2026-12-02", "trailing newline\n",
]

# Id lists decoded as such: bytes that do not form UTF-8, a split character, ▁ runs, specials.
def raw_id_cases(vocab):
    b = lambda x: vocab[f"<0x{x:02X}>"]  # noqa: E731
    sp = vocab["▁"] if "▁" in vocab else None
    cases = [[b(0xE2), b(0x82), b(0xAC)], [b(0xE2), b(0x82)], [b(0xFF)], [b(0xC3), vocab["<bos>"], b(0xA9)],
             [vocab["<start_of_turn>"], b(0x41), vocab["<end_of_turn>"]], [b(0xF0), b(0x9F), b(0x99), b(0x82)]]
    if sp is not None:
        cases += [[sp, sp, b(0x41)], [sp]]
    return cases


def hf_environment():
    """Jinja2 as transformers' apply_chat_template sets it up (its chat_template_utils): a sandboxed,
    immutable environment with trim_blocks, lstrip_blocks and the loopcontrols extension, `tojson`
    as json.dumps(ensure_ascii=False) and a raise_exception global."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Gets the weather for a place.",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City, country"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "description": "How many days", "nullable": True},
        "Hourly": {"type": "boolean"},
        "fields": {"type": "array", "items": {"type": "string", "enum": ["temp", "wind"]}},
        "where": {"type": "object", "description": "A point", "properties": {
            "lat": {"type": "number"}, "lon": {"type": "number"}}, "required": ["lat", "lon"]},
        "mode": {"type": ["string", "null"], "description": "A type list"},
        "points": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}},
                                              "required": ["x"]}}},
        "required": ["location"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "The time, UTC.",
                                          "parameters": {"type": "object", "properties": {}},
                                          "response": {"type": "object", "description": "ISO time"}}}

GEMMA3_CASES = [
    ("user only", [{"role": "user", "content": "What is 2+2?"}], {}, True),
    ("system folds into the first user turn", [{"role": "system", "content": "Be terse."},
                                              {"role": "user", "content": "  Hi there  "}], {}, True),
    ("multi-turn, no generation prompt", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!\n"},
                                         {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye."}],
     {}, False),
    ("content parts with an image", [{"role": "system", "content": [{"type": "text", "text": "Describe."}]},
                                     {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is it? "}]}],
     {}, True),
    ("unicode and newlines", [{"role": "user", "content": "Café?\n\n日本語 🙂"}], {}, True),
    ("roles must alternate", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], {}, True),
]

GEMMA4_CASES = [
    ("user only", [{"role": "user", "content": "What is 2+2?"}], {}, True),
    ("thinking on", [{"role": "user", "content": "Think about it."}], {"enable_thinking": True}, True),
    ("system and turns", [{"role": "system", "content": " Be terse. "}, {"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "<|channel>thought\nsay hello<channel|>Hello."},
                          {"role": "user", "content": "Bye"}], {}, True),
    ("developer with tools", [{"role": "developer", "content": "Use tools."},
                              {"role": "user", "content": "Weather in Oslo?"}], {"tools": [WEATHER, CLOCK]}, True),
    ("tools without a system message", [{"role": "user", "content": "Time?"}], {"tools": [CLOCK]}, True),
    ("tool call and response", [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {
            "location": "Oslo, Norway", "days": 2, "Hourly": False, "ratio": 0.1, "tiny": 1e-05, "big": 1e16,
            "none": None, "fields": ["temp", "wind"], "where": {"lon": 10.75, "lat": 59.91}}}}],
         "tool_responses": [{"name": "get_weather", "response": {"temp": -3.5, "sky": "snow", "ok": True}}]},
    ], {"tools": [WEATHER]}, True),
    ("string arguments and a plain response", [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [{"type": "function", "function": {
            "name": "get_time", "arguments": "{\"tz\": \"UTC\"}"}}],
         "tool_responses": [{"name": "get_time", "response": "12:00"}]},
        {"role": "user", "content": "Thanks"}], {"tools": [CLOCK]}, True),
    ("media parts", [{"role": "user", "content": [{"type": "text", "text": " Look: "}, {"type": "image"},
                                                  {"type": "audio"}, {"type": "video"},
                                                  {"type": "text", "text": "what?"}]}], {}, True),
    ("training turn", [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hi!"}], {}, False),
]

# The revised Gemma 4 template: OpenAI-style tool messages folded into the model turn (matched by
# tool_call_id), reasoning kept before tool calls after the last user turn, consecutive assistant
# messages continuing one model turn, a pending tool call left open for its response.
GEMMA4_REVISED_CASES = GEMMA4_CASES + [
    ("openai tool messages", [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"role": "assistant", "reasoning_content": "Two calls.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"location": "Oslo"}}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": {"location": "Rome"}}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "21 C"},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "-3 "}, {"type": "text", "text": "C"}]},
        {"role": "assistant", "content": "Oslo -3 C, Rome 21 C."},
        {"role": "user", "content": "Thanks"}], {"tools": [WEATHER]}, True),
    ("pending tool call", [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_time", "arguments": {}}}]}],
     {"tools": [CLOCK], "enable_thinking": True}, True),
    ("tool response then generation", [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "tool_calls": [{"id": "t", "type": "function", "function": {"name": "get_time",
                                                                                       "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "t", "content": "12:00"}], {"tools": [CLOCK]}, True),
    ("thinking generation prompt", [{"role": "user", "content": "Hi"}], {"enable_thinking": True}, True),
]


def main():
    os.makedirs(HERE, exist_ok=True)
    tok, text = build_tokenizer()
    with open(os.path.join(HERE, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>", "eos_token": "<eos>",
              "pad_token": "<pad>", "unk_token": "<unk>", "tokenizer_class": "GemmaTokenizer"}
    with open(os.path.join(HERE, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")

    with open(os.path.join(HERE, "golden_tokenize.jsonl"), "w", encoding="utf-8") as f:
        for t in TEXTS:
            ids = tok.encode(t, add_special_tokens=False).ids
            ids_special = tok.encode(t, add_special_tokens=True).ids
            f.write(json.dumps({"text": t, "ids": ids, "ids_special": ids_special,
                                "decoded": tok.decode(ids_special, skip_special_tokens=False),
                                "decoded_skip": tok.decode(ids_special, skip_special_tokens=True)},
                               ensure_ascii=False) + "\n")
        for ids in raw_id_cases(tok.get_vocab(with_added_tokens=True)):
            f.write(json.dumps({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                                "decoded_skip": tok.decode(ids, skip_special_tokens=True)}, ensure_ascii=False) + "\n")

    env = hf_environment()
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:
        render_jinja_template = None
    checked = 0
    with open(os.path.join(HERE, "golden_chat.jsonl"), "w", encoding="utf-8") as f:
        for name, cases in (("gemma3_chat_template.jinja", GEMMA3_CASES), ("gemma4_chat_template.jinja", GEMMA4_CASES),
                            ("gemma4_revised_chat_template.jinja", GEMMA4_REVISED_CASES)):
            with open(os.path.join(HERE, name), encoding="utf-8") as tf:
                source = tf.read()
            template = env.from_string(source)
            for case, messages, kwargs, gen in cases:
                kwargs = dict(kwargs)
                tools = kwargs.pop("tools", None)
                row = {"template": name, "name": case, "messages": messages, "tools": tools, "kwargs": kwargs,
                       "add_generation_prompt": gen}
                try:
                    prompt = template.render(messages=messages, tools=tools, add_generation_prompt=gen,
                                             bos_token="<bos>", eos_token="<eos>", **kwargs)
                    row["prompt"] = prompt
                    row["ids"] = tok.encode(prompt, add_special_tokens=False).ids
                except jinja2.exceptions.TemplateError as e:
                    row["error"] = str(e)
                if render_jinja_template is not None and "prompt" in row:
                    ref, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=source,
                                                   add_generation_prompt=gen, bos_token="<bos>", eos_token="<eos>",
                                                   **kwargs)
                    if ref[0] != row["prompt"]:
                        sys.exit(f"{name} / {case}: transformers renders differently:\n{ref[0]!r}\n{row['prompt']!r}")
                    checked += 1
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {HERE}; {len(tok.get_vocab())} tokens"
          + (f"; {checked} prompts equal transformers' render_jinja_template" if render_jinja_template else ""))


if __name__ == "__main__":
    main()
