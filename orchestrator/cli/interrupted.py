"""A Ctrl-C before ``conclave`` follows anything — while Python loads the commands, while a
command starts (settings, the plan file, the embedded database and worker, the submit), or in
a command that does not handle it itself — ends the process with one line on stderr and exit
130 (:data:`orchestrator.cli.common.INTERRUPTED`), never a traceback and never Click's bare
``Aborted!``. Standard library only: it runs before anything else is imported.

A command that follows a plan handles its own Ctrl-C (:func:`orchestrator.cli.running.interrupted`:
detach, or cancel on a second one) and never reaches here.
"""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

EXIT_INTERRUPTED = 130  # the shell's code for SIGINT; common.INTERRUPTED is the same

MESSAGE = ("interrupted: conclave stopped before it was following a plan "
           "(one it had submitted keeps running or waits, stored: `conclave list` shows it)")


def interrupted_at_start() -> NoReturn:
    """Say so in one line and exit 130; a further Ctrl-C while saying it is ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stderr.write(f"\n{MESSAGE}\n")
    sys.stderr.flush()
    sys.exit(EXIT_INTERRUPTED)
