"""Child processes that tests signal start with the default signal dispositions.

A shell that starts a job in the background (`cmd &`, `nohup cmd`) hands it SIGINT
and SIGHUP ignored, and its children inherit that — so would the processes a test
starts to interrupt, and cxlbench rightly leaves an inherited SIG_IGN alone (nohup
means nohup). The tests are about what happens when the signal arrives, so their
children start as if from a terminal, however the test suite itself was started.
"""
import signal


def default_dispositions() -> None:
    """A Popen preexec_fn: SIGINT and SIGHUP back to their defaults before exec."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
