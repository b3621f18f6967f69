"""LLM: vLLM's offline inference class over fp4lm's continuous-batching C++ engine."""
import json
import os
import random
import sys
from typing import Dict, List, Optional, Sequence, Union

from . import _core, _images
from .outputs import BeamSearchOutput, BeamSearchSequence, CompletionOutput, Logprob, RequestOutput
from .sampling_params import BeamSearchParams, SamplingParams
from .tokenizer import Tokenizer

PromptType = Union[str, Dict]


class LLM:
    """Loads a checkpoint once and generates from batches of prompts.

    model: the checkpoint directory, or a Hugging Face Hub id ("org/name"): found in the shared Hub
    cache (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub) or downloaded there from HF_ENDPOINT
    (docs/HUB.md). revision: the Hub branch, tag or commit (None = main). download_dir: the Hub
    cache directory to use instead. tokenizer: a directory or Hub id to read the tokenizer and chat
    template from instead of the model's. dtype: activation/KV dtype ("auto" = the checkpoint's
    torch_dtype, "float32", "bfloat16", "float16"). override_activation_dtype: "bfloat16" or
    "float16" runs NVFP4 W4A4 layers through the W4A16 path at that dtype ("auto" = as the
    checkpoint says; the files are never changed). activation_scale: "static" (the default: NVFP4 W4A4
    layers quantize activations with the checkpoint's input_scale) or "dynamic" (each token with its
    own global scale, amax / 2688; no input_scale needed). kv_cache_dtype: "auto" (= dtype), "float32",
    "bfloat16", "float16" or "fp8" (E4M3 with the checkpoint's k/v scales). max_model_len: context length per sequence
    (None = min(max_position_embeddings, 8192)). seed: seeds requests whose SamplingParams.seed
    is None. linear_backend, moe_backend: force a kernel backend (`fp4lm backends` lists them).
    a16_max_tokens: W4A4 calls with at most this many tokens use the W4A16 kernel (0 = off).
    threads: worker threads (None = physical cores). max_num_seqs, max_num_batched_tokens:
    the most sequences and tokens in one engine step. kv_cache_memory_bytes: the KV-cache
    budget for admission (None = a quarter of RAM). enable_prefix_caching: reuse the K/V of
    prompt prefixes computed before (automatic prefix caching, vLLM's default), in blocks of
    block_size tokens. speculative_config: vLLM's dict, e.g. {"method": "ngram",
    "num_speculative_tokens": 4} (prompt-lookup drafts verified in one step; greedy output unchanged).
    limit_mm_per_prompt: vLLM's {"image": N, "video": M}, the most images / videos one prompt may
    carry (999 each when not given, as vLLM; an audio limit has no effect: fp4lm takes no audio).
    allowed_local_media_path: the directory LLM.chat's file:// image URLs may read from (None: no
    file:// URLs, as vLLM). allowed_media_domains: the hosts LLM.chat's http(s) image URLs may be
    fetched from (None: none, no remote fetching).
    """

    def __init__(self, model: str, *, dtype: str = "auto", override_activation_dtype: str = "auto",
                 kv_cache_dtype: str = "auto",
                 max_model_len: Optional[int] = None, seed: int = 0, linear_backend: Optional[str] = None,
                 moe_backend: Optional[str] = None, a16_max_tokens: int = 0, threads: Optional[int] = None,
                 max_num_seqs: int = 32, max_num_batched_tokens: int = 512,
                 kv_cache_memory_bytes: Optional[int] = None, enable_prefix_caching: bool = True,
                 block_size: int = 16, speculative_config: Optional[dict] = None,
                 activation_scale: str = "static", revision: Optional[str] = None,
                 download_dir: Optional[str] = None, tokenizer: Optional[str] = None,
                 limit_mm_per_prompt: Optional[dict] = None, allowed_local_media_path: Optional[str] = None,
                 allowed_media_domains: Optional[List[str]] = None):
        model = os.fspath(model)
        self.model_id = model
        model, self.model_source = _core.resolve_model(model, revision or "", os.fspath(download_dir or ""))
        tokenizer_dir = ""
        if tokenizer is not None:
            tokenizer_dir, _ = _core.resolve_model(os.fspath(tokenizer), "", os.fspath(download_dir or ""), True)
        if not os.path.isdir(model):
            raise FileNotFoundError(f"{model}: not a checkpoint directory")
        for name, v in (("max_model_len", max_model_len), ("threads", threads),
                        ("kv_cache_memory_bytes", kv_cache_memory_bytes)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{name} must be None or an integer >= 1, got {v!r}")
        if not isinstance(enable_prefix_caching, bool):
            raise ValueError(f"enable_prefix_caching must be a bool, got {enable_prefix_caching!r}")
        if not isinstance(block_size, int) or isinstance(block_size, bool):
            raise ValueError(f"block_size must be an integer, got {block_size!r}")  # its range: the engine's
        if speculative_config is not None and not isinstance(speculative_config, dict):
            raise ValueError(f"speculative_config must be None or a dict, got {speculative_config!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self._image_limit = _images.parse_limit(limit_mm_per_prompt)
        self._video_limit = _images.parse_video_limit(limit_mm_per_prompt)
        self._media = _images.MediaOptions(allowed_local_media_path, allowed_media_domains)
        self.model = model
        self.seed = seed
        self._engine = _core.Engine(model, dtype, override_activation_dtype, kv_cache_dtype, max_model_len or 0,
                                    linear_backend or "", moe_backend or "", a16_max_tokens, threads or 0,
                                    max_num_seqs, max_num_batched_tokens, kv_cache_memory_bytes or 0,
                                    enable_prefix_caching, block_size,
                                    json.dumps(speculative_config) if speculative_config else "",
                                    activation_scale, tokenizer_dir)
        self._rng = random.Random(seed)
        self._next_request_id = 0
        self._tokenizer = Tokenizer(self._engine) if self._engine.has_tokenizer else None
        self._default_sampling = self._engine.sampling_defaults()  # generation_config.json, as the server

    # -- vLLM's API ---------------------------------------------------------------------------

    def get_tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            raise RuntimeError(f"{self.model}: no tokenizer.json, so text cannot be encoded or decoded; "
                               "give prompt_token_ids")
        return self._tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """SamplingParams() with the checkpoint's generation_config.json values, as vLLM does."""
        return SamplingParams(**self._default_sampling)

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 use_tqdm: bool = True) -> List[RequestOutput]:
        """Generates completions for every prompt, all batched in the engine at once.

        prompts: a string, a {"prompt_token_ids": [...]} (or {"prompt": "..."}) dict, or a list
        of them. A dict may carry vLLM's "multi_modal_data": {"image": one image or a list}, each a
        PIL.Image.Image, encoded bytes (PNG, JPEG, WebP) or a file path, for a model with a vision
        tower; the prompt holds one placeholder (<|image_pad|>, as in
        "<|vision_start|><|image_pad|><|vision_end|>") per image, in order, which the image's tokens
        replace (RequestOutput.prompt_token_ids are the expanded ids, as vLLM's).
        "multi_modal_data": {"video": frames} (Qwen3-VL / Qwen3.5 checkpoints with a
        Qwen3VLVideoProcessor): one video as a list of frames (PIL images, uint8 numpy arrays of
        height x width x 3, encoded bytes or paths) or a numpy array of frames x height x width x 3,
        or a list of such videos; frames are taken as given (no sampling), each video replacing one
        <|video_pad|> (in "<|vision_start|><|video_pad|><|vision_end|>") with the processor's
        timestamps and frame groups. Video files are not decoded.
        sampling_params: one for all prompts or one per prompt (None: the defaults).
        Returns one RequestOutput per prompt, in input order.
        """
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        parsed = [self._parse_prompt(p, f"prompt {i}") for i, p in enumerate(prompts)]
        return self._run(self._attach_images(parsed), sampling_params, use_tqdm)

    def chat(self, messages, sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
             use_tqdm: bool = True, add_generation_prompt: bool = True,
             chat_template_kwargs: Optional[dict] = None, tools: Optional[list] = None,
             continue_final_message: bool = False) -> List[RequestOutput]:
        """Generates replies to one conversation (a list of {"role", "content"} messages) or a
        list of conversations, rendered with the checkpoint's chat template (with `tools`, and
        the final message left open when continue_final_message, as vLLM's LLM.chat). Image
        content parts as vLLM's: {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}
        (or a file:// URL under allowed_local_media_path, an http(s) URL from allowed_media_domains),
        {"type": "image_pil", "image_pil": img};
        the template sees each as {"type": "image"}. Video as frames: {"type": "video", "video":
        [frame, ...]} (generate's forms), which the template sees as {"type": "video"}; video_url
        parts (files) are refused."""
        if continue_final_message:
            add_generation_prompt = False
        if not isinstance(messages, (list, tuple)):
            raise ValueError("messages must be a list of messages or a list of conversations")
        conversations = messages if messages and isinstance(messages[0], (list, tuple)) else [messages]
        tok = self.get_tokenizer()
        parsed = []
        for c, conv in enumerate(conversations):
            where = f"conversation {c}"
            try:
                conv, images, videos = _images.chat_images(conv, self._media)
            except (TypeError, ValueError) as e:
                raise type(e)(f"{where}: {e}") from None
            if len(videos) > self._video_limit:
                raise ValueError(f"{where}: At most {self._video_limit} video(s) may be provided in one prompt. "
                                 "Set `limit_mm_per_prompt` to increase this limit.")
            if images or videos:
                self._check_accepts_images(where)
                _images.check_limit(len(images), self._image_limit, where)
                try:
                    images = [(name, load()) for name, load in images]
                except (TypeError, ValueError) as e:
                    raise type(e)(f"{where}: {e}") from None
            text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=add_generation_prompt,
                                           chat_template_kwargs=chat_template_kwargs, tools=tools,
                                           continue_final_message=continue_final_message)
            media = _images.MediaList(images, videos) if (images or videos) else None
            parsed.append((text, tok.encode(text, add_special_tokens=False), media, where))
        return self._run(self._attach_images(parsed), sampling_params, use_tqdm)

    def beam_search(self, prompts: Sequence[PromptType], params: BeamSearchParams,
                    use_tqdm: bool = False) -> List[BeamSearchOutput]:
        """vLLM's LLM.beam_search: the params.beam_width best beams of each prompt, best first.

        prompts: strings or {"prompt_token_ids"} / {"prompt"} dicts. Each step runs every live
        beam through the engine as a one-token request for the top 2 * beam_width logprobs
        (engine/beam_search.h); a beam ending in EOS completes; the score is the cumulative logprob
        / length ** length_penalty, the length counting the prompt.
        """
        if not isinstance(params, BeamSearchParams):
            raise ValueError("params must be a BeamSearchParams")
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        parsed = [self._parse_prompt(p, f"prompt {i}") for i, p in enumerate(prompts)]
        for _, _, images, where in parsed:
            if images is not None:
                raise ValueError(f"{where}: beam_search does not take multi_modal_data")
        results = self._engine.beam_search([list(ids) for _, ids, _, _ in parsed], params.beam_width, params.max_tokens,
                                           float(params.length_penalty), bool(params.ignore_eos),
                                           bool(params.early_stopping))
        outputs = []
        for (_, ids, _, _), beams in zip(parsed, results):
            seqs = []
            for b in beams:
                logprobs = []
                for _, _, top in b["logprobs"]:
                    logprobs.append({t: Logprob(lp, j + 1, self._decode_one(t)) for j, (t, lp) in enumerate(top)})
                text = (self._engine.decode(b["token_ids"], True) if self._engine.has_tokenizer else None)
                seqs.append(BeamSearchSequence(tokens=list(ids) + list(b["token_ids"]), logprobs=logprobs,
                                               cum_logprob=b["cum_logprob"], text=text,
                                               finish_reason="stop" if b["eos"] else "length"))
            outputs.append(BeamSearchOutput(sequences=seqs))
        return outputs

    # -- internals ----------------------------------------------------------------------------

    # vLLM's TextPrompt / TokensPrompt keys fp4lm reads; any other is refused, not ignored.
    _PROMPT_KEYS = ("prompt", "prompt_token_ids", "multi_modal_data")

    def _parse_prompt(self, p, where):
        """(text, ids, images or None, where): images are (name, bytes) from multi_modal_data."""
        if isinstance(p, str):
            return p, self.get_tokenizer().encode(p, add_special_tokens=True), None, where
        if isinstance(p, dict):
            unknown = [k for k in p if k not in self._PROMPT_KEYS]
            if unknown:
                raise ValueError(f"{where}: unsupported prompt key(s) {unknown} (fp4lm reads "
                                 f"{', '.join(self._PROMPT_KEYS)})")
            images = None
            if "multi_modal_data" in p:
                mm = p["multi_modal_data"]
                items = mm.get("image") if isinstance(mm, dict) else None
                video = mm.get("video") if isinstance(mm, dict) else None
                if (items is not None and not (isinstance(items, (list, tuple)) and not items)) or video is not None:
                    self._check_accepts_images(where)  # before any image is read
                try:
                    images = _images.multi_modal_images(mm, where, self._image_limit)
                    videos = _images.multi_modal_videos(mm, where, self._video_limit)
                    if videos:
                        images = _images.MediaList(images, videos)
                except (TypeError, ValueError) as e:
                    msg = str(e)
                    raise type(e)(msg if msg.startswith(where) else f"{where}: {msg}") from None
            if "prompt_token_ids" in p:
                ids = p["prompt_token_ids"]
                if not isinstance(ids, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool)
                                                                  for t in ids):
                    raise ValueError("prompt_token_ids must be a list of token ids")
                return p.get("prompt"), list(ids), images, where
            if "prompt" in p and isinstance(p["prompt"], str):
                return p["prompt"], self.get_tokenizer().encode(p["prompt"], add_special_tokens=True), images, where
        raise ValueError(f"a prompt must be a string or a dict with 'prompt_token_ids' or 'prompt', got {p!r}")

    def _check_accepts_images(self, where):
        try:
            self._engine.check_accepts_images(self.model_id)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None

    def _attach_images(self, parsed):
        """(text, ids, ImagePrompt or None) per prompt: each prompt's images encoded by the vision
        tower and its placeholders expanded (the ids become the expanded ones)."""
        out = []
        for text, ids, images, where in parsed:
            handle = None
            if images is not None:
                try:
                    handle = self._engine.attach_images(list(ids), list(images), self.model_id,
                                                        getattr(images, "videos", []))
                except ValueError as e:
                    raise ValueError(f"{where}: {e}") from None
                ids = handle.prompt_token_ids
            out.append((text, ids, handle))
        return out

    def _run(self, parsed, sampling_params, use_tqdm):
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            per_prompt = [sampling_params] * len(parsed)
        else:
            per_prompt = list(sampling_params)
            if len(per_prompt) != len(parsed):
                raise ValueError(f"sampling_params: got {len(per_prompt)} for {len(parsed)} prompts "
                                 "(give one, or one per prompt)")
            if not all(isinstance(sp, SamplingParams) for sp in per_prompt):
                raise ValueError("sampling_params must be SamplingParams objects")
        requests, owners = [], []
        for i, ((_, ids, images), sp) in enumerate(zip(parsed, per_prompt)):
            for k in range(max(sp.n, sp.best_of or sp.n)):
                requests.append(self._request(ids, sp, k, images))
                owners.append((i, k))
        progress = self._progress_bar(len(requests)) if use_tqdm else None
        try:
            results = self._engine.generate(requests, progress.update_to if progress else None)
        finally:
            if progress:
                progress.close()

        outputs = []
        for i, (text, ids, _) in enumerate(parsed):
            outputs.append(RequestOutput(request_id=str(self._next_request_id), prompt=text,
                                         prompt_token_ids=list(ids), outputs=[]))
            self._next_request_id += 1
        keys = [[] for _ in outputs]  # best_of: each sample's cumulative logprob
        for (i, k), r in zip(owners, results):
            sp = per_prompt[i]
            outputs[i].outputs.append(self._completion(k, r, sp.logprobs is not None))
            keys[i].append(sum(lp for _, lp, _ in r["logprobs"]))
            if k == 0 and sp.prompt_logprobs is not None:
                outputs[i].prompt_logprobs = self._prompt_logprobs(r, sp.prompt_logprobs)
        for out, sp, key in zip(outputs, per_prompt, keys):
            if sp.best_of is not None and sp.best_of > sp.n:
                # vLLM v0's ranking, as the server ranks (each keeps its sample index).
                out.outputs = [out.outputs[j] for j in _core.best_of_order(key, sp.n)]
        return outputs

    def _request(self, ids, sp: SamplingParams, index: int, images=None):
        if sp.seed is not None:
            seed = _core.sample_seed(sp.seed % 2**64, index)  # as the server seeds its samples
        else:
            seed = self._rng.getrandbits(64)
        greedy = sp.sampling_type_greedy
        max_tokens = sp.max_tokens
        if max_tokens is None:
            max_tokens = self._engine.default_max_tokens(len(ids))  # the server's rule, in the engine
        return {
            "prompt_token_ids": list(ids), "max_tokens": max_tokens, "min_tokens": sp.min_tokens,
            "temperature": 0.0 if greedy else float(sp.temperature), "top_k": max(sp.top_k, 0),
            "top_p": float(sp.top_p), "min_p": float(sp.min_p), "seed": seed, "stop": list(sp.stop),
            "stop_token_ids": list(sp.stop_token_ids), "ignore_eos": sp.ignore_eos,
            "presence_penalty": float(sp.presence_penalty), "frequency_penalty": float(sp.frequency_penalty),
            "repetition_penalty": float(sp.repetition_penalty),
            # best_of > n ranks by the sampled tokens' logprobs, so it needs them even when unasked.
            "logprobs": sp.logprobs if sp.logprobs is not None else 0 if (sp.best_of or 0) > sp.n else -1,
            # The prompt's logprobs are the same for every sample: the first computes them.
            "prompt_logprobs": sp.prompt_logprobs if sp.prompt_logprobs is not None and index == 0 else -1,
            "skip_special_tokens": sp.skip_special_tokens,
            "logit_bias": [(int(t), float(b)) for t, b in (sp.logit_bias or {}).items()],
            "structured": sp._structured_spec(),
            "images": images,  # Engine.attach_images' handle: every sample shares its rows
        }

    def _completion(self, index, r, want_logprobs):
        logprobs = cumulative = None
        if want_logprobs:
            logprobs, cumulative = [], 0.0
            for token, lp, top in r["logprobs"]:
                entry = {}
                ranks = {t: j + 1 for j, (t, _) in enumerate(top)}
                entry[token] = Logprob(lp, ranks.get(token), self._decode_one(token))
                for t, tlp in top:
                    if t not in entry:
                        entry[t] = Logprob(tlp, ranks[t], self._decode_one(t))
                logprobs.append(entry)
                cumulative += lp
        return CompletionOutput(index=index, text=r["text"], token_ids=list(r["token_ids"]),
                                cumulative_logprob=cumulative, logprobs=logprobs,
                                finish_reason=r["finish_reason"], stop_reason=r["stop_reason"])

    def _prompt_logprobs(self, r, k):
        """vLLM's prompt_logprobs: None for the first token, then {token_id: Logprob} for the
        prompt token (its rank) and the top k (ranks 1..k)."""
        out = [None]
        for token, lp, rank, top in r["prompt_logprobs"]:
            entry = {token: Logprob(lp, rank, self._decode_one(token))}
            for j, (t, tlp) in enumerate(top[:k]):
                entry[t] = Logprob(tlp, j + 1, self._decode_one(t))
            out.append(entry)
        return out

    def _decode_one(self, token):
        return self._tokenizer.decode([token]) if self._tokenizer is not None else None

    @staticmethod
    def _progress_bar(total):
        """A tqdm bar counting finished requests, when tqdm is installed and stderr is a terminal."""
        if not sys.stderr.isatty():
            return None
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return None
        bar = tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)

        def update_to(done):
            bar.update(done - bar.n)

        bar.update_to = update_to
        return bar
