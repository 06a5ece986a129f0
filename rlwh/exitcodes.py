"""Exit statuses of `rlwh ingest`, `rlwh check`, `rlwh nightly` and `rlwh compare`, one table, so a script
or a systemd unit can act on the outcome without parsing text.

When several outcomes hold at once the most severe wins, in the order of SEVERITY:
a failure or a partial load means data is missing, so any comparison made from it
(a regression, or its absence) cannot be trusted and is reported second.
"""

from __future__ import annotations

OK = 0            # every file loaded (or was unchanged), no regression
FAILED = 1        # a file or a run dir failed to load, or the command failed (bad path, lock, SQL)
USAGE = 2         # the command line is wrong (click's own usage errors)
REGRESSION = 3    # nightly, compare: a (role, rank) rose beyond a threshold
LOG_RULES = 4     # check: every file would load, but a VeRL log fails the seed's log rules
PARTIAL = 5       # a file loaded only in part (rows before the damage kept); nothing failed
NOTHING_FOUND = 6  # no profiler file under the folder (or no run dir under the nightly root)
INTERRUPTED = 130  # any command: Ctrl-C (SIGINT) stopped it (rlwh.interrupts: 128 + 2, as shells say)

SEVERITY = (FAILED, PARTIAL, NOTHING_FOUND, REGRESSION, LOG_RULES, OK)  # most severe first


def most_severe(codes) -> int:
    """The code that wins among `codes` (OK when there are none)."""
    present = set(codes)
    return next((code for code in SEVERITY if code in present), OK)


def for_ingest(failed: int, partial: int, files: int) -> int:
    """An ingest's status from its counts: files failed, files partial, files found."""
    if failed:
        return FAILED
    if partial:
        return PARTIAL
    if files == 0:
        return NOTHING_FOUND
    return OK
