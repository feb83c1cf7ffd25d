"""Test-only launcher: `specpilot` plus a SIGUSR1 handler that sleeps $SPECPILOT_TEST_STALL_S seconds.
Python runs signal handlers on the main thread, which is the operator's event loop, so the signal leaves
the loop stuck exactly as a blocking call in a handler would, without any hook in the product."""

from __future__ import annotations

import os
import signal
import sys
import time

from specpilot.cli import main

STALL_ENV = "SPECPILOT_TEST_STALL_S"

if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, lambda *_: time.sleep(float(os.environ[STALL_ENV])))
    sys.exit(main())
