"""Comments, docs and help text point only at files in the repository (or name a public source)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for top in ("operator", "runtime", "harness", "docs", "charts", "scripts", "images", "tests")
           for p in (ROOT / top).rglob("*") if p.suffix in {".py", ".md", ".txt", ".tpl", ".yaml", ".sh"}
           or p.name == "Dockerfile"] + [ROOT / "README.md", ROOT / "Makefile"]
# Documents that live outside the repository, and issue numbers, mean nothing to a reader of the code.
OUTSIDE = re.compile(r"FACTS(\.md| §)|ARCHITECTURE(\.md| \")|\bissue \d+\b|\.\./shared")
REPO_PATH = re.compile(r"\b((?:docs|data|scripts|charts|deploy|crds|images|tests)/[\w./-]*\.(?:md|json|py|sh|yaml))\b")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def test_nothing_points_outside_the_repository() -> None:
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in SOURCES if p.is_file()
            and p.name != Path(__file__).name for m in OUTSIDE.finditer(_text(p))]
    assert not hits


def test_every_repository_path_named_in_docs_and_comments_exists() -> None:
    missing = {f"{p.relative_to(ROOT)}: {m.group(1)}" for p in SOURCES if p.is_file()
               for m in REPO_PATH.finditer(_text(p))
               if "*" not in m.group(1) and not (ROOT / m.group(1)).exists()}
    assert not missing
