"""The checkpoint's tokenizer (tokenizer.json) and chat template, as LLM.get_tokenizer() returns."""
import json
from typing import List, Optional


class Tokenizer:
    """encode/decode/apply_chat_template with Hugging Face's argument names."""

    def __init__(self, engine):
        self._engine = engine

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return list(self._engine.encode(text, add_special_tokens))

    def decode(self, token_ids, skip_special_tokens: bool = False) -> str:
        return self._engine.decode([int(t) for t in token_ids], skip_special_tokens)

    def __call__(self, text: str, add_special_tokens: bool = True):
        return {"input_ids": self.encode(text, add_special_tokens)}

    def apply_chat_template(self, messages, tokenize: bool = True, add_generation_prompt: bool = False,
                            chat_template_kwargs: Optional[dict] = None, tools=None,
                            continue_final_message: bool = False, **kwargs):
        """Renders `messages` (a list of {"role", "content"} dicts) with the checkpoint's
        template; returns the token ids, or the text when tokenize=False. `tools`: a list of
        {"type": "function", "function": {...}} the template shows; chat_template_kwargs (or
        keywords) are more template variables (enable_thinking a bool). continue_final_message
        leaves the last message open (the rendering is cut after its content), as Hugging Face."""
        options = dict(chat_template_kwargs or {})
        options.update(kwargs)
        enable_thinking = options.pop("enable_thinking", None)
        if enable_thinking is not None and not isinstance(enable_thinking, bool):
            raise ValueError(f"enable_thinking must be a bool, got {enable_thinking!r}")
        if tools is not None and not isinstance(tools, (list, tuple)):
            raise ValueError("tools must be a list of tools")
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message and add_generation_prompt cannot both be true")
        text = self._engine.apply_chat_template(json.dumps(list(messages)), add_generation_prompt, enable_thinking,
                                                json.dumps(None if tools is None else list(tools)),
                                                json.dumps(options))
        if continue_final_message:
            last = messages[-1].get("content") or ""
            at = text.rfind(last) if last else -1
            if at < 0:
                raise ValueError("continue_final_message: the final message's content is not in the rendering")
            text = text[:at + len(last)]
        return self.encode(text, add_special_tokens=False) if tokenize else text

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._engine.token_eos_id()

    @property
    def vocab_size(self) -> int:
        return self._engine.tokenizer_vocab_size()

    def __len__(self) -> int:
        return self.vocab_size
