"""Problems as lines a person reads: each one line and bounded, a long list summarised.

One list of 10,000 candidates made `specpilot validate` print 9,969 lines, and a problem quoting a value
repeats however large the value is. `specpilot-runtime serve`, `specpilot validate` and `specpilot render`
print through `summarised` and `one_line`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .speculative import Problem

# Up to this many problems are printed as they are; a longer list is summarised to about this many lines.
MAX_LINES = 20
# Problems shown per field (list items count as one field: candidates[0], candidates[1], ...).
SHOWN_PER_FIELD = 3
# A message, and a field path (a map key may be anything), cut to this many characters.
MAX_MESSAGE_CHARS = 500
MAX_PATH_CHARS = 200

_INDEX = re.compile(r"\[\d+\]")


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` on one line (control characters escaped: a newline in a value must not start a line of its
    own) and at most about `limit` characters, saying how many were left out."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    if not text.isprintable():
        text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return text


def field_of(path: str) -> str:
    """The field a problem's path is about, items of a list taken together: `spec.tuning.candidates[*]`."""
    return _INDEX.sub("[*]", path)


def summarised(problems: Sequence[Problem], most: int = MAX_LINES,
               per_field: int = SHOWN_PER_FIELD) -> list[Problem]:
    """`problems` as they are when there are at most `most`; otherwise, by field in the order first met, at
    most `per_field` of each and then one `... and N more problems like this` for the field, stopping after
    about `most` lines with `... and N more problems` for the fields not shown at all."""
    if len(problems) <= most:
        return list(problems)
    fields: dict[str, list[Problem]] = {}
    for p in problems:
        fields.setdefault(field_of(p.path), []).append(p)
    out: list[Problem] = []
    unshown = 0
    for field, members in fields.items():
        room = most - len(out)
        if room <= 0:
            unshown += len(members)
            continue
        shown = members[:min(per_field, room)]
        out += shown
        if len(members) > len(shown):
            more = len(members) - len(shown)
            out.append(Problem(field, f"... and {more} more problem{'s' if more > 1 else ''} like this"))
    if unshown:
        out.append(Problem("", f"... and {unshown} more problem{'s' if unshown > 1 else ''}"))
    return out
