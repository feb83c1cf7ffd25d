"""OpenAI-compatible request parsing and response bodies for the simulated engine. Pure.

The simulator is not a language model: its text is filler words, one per token, so clients see token
counts and timing exactly as the engine produced them. Prompt lengths are estimated from words and
punctuation, close enough for prefill accounting.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

# vLLM's default for /v1/completions without max_tokens (the OpenAI default).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16

_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORDS = ("the", "draft", "token", "is", "accepted", "and", "verified", "by", "target", "model", "in",
          "one", "step", "so", "output", "flows", "faster", "when", "guesses", "land")


class BadRequest(ValueError):
    """A request vLLM would answer with 400; the message is what the client sees."""


@dataclass(frozen=True)
class GenerationRequest:
    chat: bool
    model: str
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool


def count_tokens(text: str) -> int:
    return max(1, len(_TOKEN.findall(text)))


def parse_request(body: Any, chat: bool, max_model_len: int) -> GenerationRequest:
    """Validate a /v1/completions or /v1/chat/completions body the way vLLM does, for the fields the
    simulator uses; unknown fields (temperature, stop, ...) are accepted and have no effect."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        texts = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                raise BadRequest(f"messages[{i}] must have a string 'content'")
            texts.append(m["content"])
        prompt_tokens = count_tokens(" ".join(texts))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise BadRequest("'prompt' must be a string (batched prompts are not simulated)")
        prompt_tokens = count_tokens(prompt)
    if prompt_tokens >= max_model_len:
        raise BadRequest(f"This model's maximum context length is {max_model_len} tokens. "
                         f"However, your request has {prompt_tokens} input tokens.")
    max_tokens = body.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        # vLLM fills the context for chat; completions keep the OpenAI default.
        max_tokens = max_model_len - prompt_tokens if chat else COMPLETIONS_DEFAULT_MAX_TOKENS
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest(f"max_tokens must be at least 1, got {max_tokens!r}")
    if prompt_tokens + max_tokens > max_model_len:
        raise BadRequest(f"This model's maximum context length is {max_model_len} tokens. However, you "
                         f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                         f"{max_tokens} in the completion).")
    options = body.get("stream_options") or {}
    return GenerationRequest(
        chat=chat, model=model, prompt_tokens=prompt_tokens, max_tokens=max_tokens,
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
    )


def filler_text(start: int, tokens: int) -> str:
    """Text for output tokens start..start+tokens-1, one word each."""
    return "".join(" " + _WORDS[i % len(_WORDS)] for i in range(start, start + tokens))


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens}


class ResponseBuilder:
    """Bodies for one request, streamed or whole, in OpenAI's shapes."""

    def __init__(self, request_id: str, req: GenerationRequest) -> None:
        self.id = request_id
        self.req = req
        self.created = int(time.time())
        self.object = "chat.completion" if req.chat else "text_completion"

    def _choice(self, text: str | None, finish_reason: str | None, delta: bool) -> dict[str, Any]:
        if not self.req.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason,
                    "stop_reason": None}
        if delta:
            return {"index": 0, "delta": {} if text is None else {"content": text}, "logprobs": None,
                    "finish_reason": finish_reason}
        return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                "finish_reason": finish_reason, "stop_reason": None}

    def _envelope(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.req.model,
                "choices": choices}

    def whole(self, text: str, completion_tokens: int) -> dict[str, Any]:
        body = self._envelope(self.object, [self._choice(text, "length", delta=False)])
        body["usage"] = usage(self.req.prompt_tokens, completion_tokens)
        return body

    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.req.chat else "text_completion"

    def role_chunk(self) -> dict[str, Any]:
        """Chat streams open with the assistant role, as vLLM's do."""
        return self._envelope(self.chunk_object(), [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                     "logprobs": None, "finish_reason": None}])

    def chunk(self, text: str, finished: bool) -> dict[str, Any]:
        return self._envelope(self.chunk_object(), [self._choice(text, "length" if finished else None, delta=True)])

    def usage_chunk(self, completion_tokens: int) -> dict[str, Any]:
        body = self._envelope(self.chunk_object(), [])
        body["usage"] = usage(self.req.prompt_tokens, completion_tokens)
        return body
