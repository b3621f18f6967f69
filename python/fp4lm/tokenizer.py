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
                            chat_template_kwargs: Optional[dict] = None, **kwargs):
        """Renders `messages` (a list of {"role", "content"} dicts) with the checkpoint's
        template; returns the token ids, or the text when tokenize=False. The template variable
        enable_thinking may be given as a keyword or in chat_template_kwargs."""
        options = dict(chat_template_kwargs or {})
        options.update(kwargs)
        enable_thinking = options.pop("enable_thinking", None)
        if options:
            raise ValueError(f"chat_template_kwargs: only 'enable_thinking' is supported, got {sorted(options)}")
        if enable_thinking is not None and not isinstance(enable_thinking, bool):
            raise ValueError(f"enable_thinking must be a bool, got {enable_thinking!r}")
        text = self._engine.apply_chat_template(json.dumps(list(messages)), add_generation_prompt, enable_thinking)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._engine.token_eos_id()

    @property
    def vocab_size(self) -> int:
        return self._engine.tokenizer_vocab_size()

    def __len__(self) -> int:
        return self.vocab_size
