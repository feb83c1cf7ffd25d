"""The user docs list what the code accepts."""

from __future__ import annotations

from pathlib import Path

from specpilot_runtime.speculative import OWNED_KEYS, VLLM_SPECULATIVE_KEYS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_speculative_keys_page_lists_every_key_extra_accepts() -> None:
    text = (DOCS / "speculative-keys.md").read_text()
    rows = {line.split("`")[1] for line in text.splitlines() if line.startswith("| `")}
    assert rows == VLLM_SPECULATIVE_KEYS - OWNED_KEYS - {"num_speculative_tokens_per_batch_size"}


def test_api_reference_documents_the_three_commands() -> None:
    text = (DOCS / "api.md").read_text()
    for command in ("specpilot validate -f", "specpilot render -f", "specpilot crd"):
        assert command in text
