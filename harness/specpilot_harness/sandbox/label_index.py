"""Objects by label, per resource type, so that a list with a label selector costs what it returns rather
than a scan of the whole type: the operator lists each object's children by label on every reconcile, and
with 1000 objects in one namespace a scan per list made the sandbox what `specpilot bench operator`
measured."""

from __future__ import annotations

from typing import Any

Key = tuple[str, str]      # (group, plural)
ObjKey = tuple[str, str]   # (namespace or "", name)


class LabelIndex:
    def __init__(self) -> None:
        self._by_pair: dict[tuple[Key, str, str], set[ObjKey]] = {}
        self._pairs: dict[tuple[Key, ObjKey], tuple[tuple[str, str], ...]] = {}

    def put(self, key: Key, okey: ObjKey, obj: dict[str, Any] | None) -> None:
        """Record `obj` stored at `okey` (None: removed)."""
        labels = tuple(((obj or {}).get("metadata", {}).get("labels") or {}).items())
        old = self._pairs.get((key, okey), ())
        if labels == old:
            return
        for label, value in old:
            members = self._by_pair.get((key, label, value))
            if members is not None:
                members.discard(okey)
                if not members:
                    del self._by_pair[(key, label, value)]
        for label, value in labels:
            self._by_pair.setdefault((key, label, value), set()).add(okey)
        if labels:
            self._pairs[(key, okey)] = labels
        else:
            self._pairs.pop((key, okey), None)

    def candidates(self, key: Key, required: list[tuple[str, str]]) -> set[ObjKey] | None:
        """Objects of the type carrying every required label=value (the smallest set that holds them: the
        caller still matches the whole selector); None when nothing is required (every object may match)."""
        if not required:
            return None
        smallest = min((self._by_pair.get((key, label, value), set()) for label, value in required), key=len)
        return set(smallest)
