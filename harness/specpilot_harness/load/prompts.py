"""The bundled task prompts (math, code, chat), shipped with the runtime's simulator data."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Literal

Kind = Literal["math", "code", "chat"]

_PACKAGE = "specpilot_harness.sim"
_FILE = "prompts/tasks.json"


@dataclass(frozen=True)
class Task:
    kind: Kind
    prompt: str

    @property
    def chat(self) -> bool:
        """Chat tasks go to /v1/chat/completions; math and code to /v1/completions."""
        return self.kind == "chat"


def bundled_tasks() -> tuple[Task, ...]:
    doc = json.loads(resources.files(_PACKAGE).joinpath(_FILE).read_text(encoding="utf-8"))
    return tuple(Task(t["kind"], t["prompt"]) for t in doc["tasks"])
