"""log_levels.py: Kopf's retried API requests are WARNING lines, its last failed attempt stays an ERROR."""

from __future__ import annotations

import io
import logging

from specpilot.controller.log_levels import RetriedAsWarning


def _logged(name: str, message: str) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RetriedAsWarning())
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        logger.error(message)
    finally:
        logger.removeHandler(handler)
    return out.getvalue().strip()


def test_a_retried_request_is_a_warning() -> None:
    line = _logged("kopf.objects", "Request attempt #1/9 failed; will retry: PATCH x -> APITooManyRequests()")
    assert line.startswith("WARNING kopf.objects: Request attempt #1/9 failed; will retry")


def test_the_last_attempt_and_other_errors_stay_errors() -> None:
    assert _logged("kopf.objects", "Request attempt #9/9 failed; escalating: PATCH x -> e").startswith("ERROR")
    assert _logged("kopf.objects", "Throttling for 1 seconds due to an unexpected error").startswith("ERROR")
    assert _logged("specpilot.controller.x", "something failed; will retry").startswith("ERROR")
