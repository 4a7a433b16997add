"""The `planc` console script: the command line of the Rust library, run in this process."""

import signal
import sys

from . import _planc


def main() -> None:
    # The process is the command line's alone: end quietly when a pipe's reader stops
    # (`planc check --format json | head`) and on Ctrl-C, as the binary does, rather than
    # wait for Python's handlers, which run only between calls into Rust.
    for name in ("SIGPIPE", "SIGINT"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_planc._cli(["planc", *sys.argv[1:]]))
