"""The errors a user can fix, in one torch-free module.

`mathrl` turns them into one line on stderr and exit status 2 (no traceback). They live here,
not beside the code that raises them, so that the CLI can catch them without importing torch
(about 1.5 s per process, and `mathrl launch` starts one per training run)."""


class ConfigError(ValueError):
    """A configuration a user must fix; the message says what and where."""


class SnapshotError(RuntimeError):
    """No usable snapshot where one was expected, or one that does not fit this run."""


class ProblemFileError(ValueError):
    """A problem file line that does not parse or does not match its task."""


class RunDirError(RuntimeError):
    """A run directory this process may not write: another process writes it, or it cannot be written at all."""


class DamagedFileError(ValueError):
    """An input file that exists but does not read whole (cut short, or not what its name says)."""
