"""Kopf logs every retried API request at ERROR ("Request attempt #1/9 failed; will retry: ..."): a 409, a
429 or a 503 the next attempt gets past is routine on a busy API server, and alerts on ERROR lines would
fire on it. A retried attempt is logged at WARNING; the last one ("escalating") stays an ERROR."""

from __future__ import annotations

import logging

RETRIED = "failed; will retry"


class RetriedAsWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and record.name.startswith("kopf") and RETRIED in record.getMessage():
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        return True


def install() -> None:
    """On every handler of the root logger: a filter on Kopf's loggers would miss records of their children."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(RetriedAsWarning())
