"""Exceptions of :mod:`search`. Each ends a command with one line and exit code 2 (bad input), unless
its docstring says otherwise (75: a temporary failure, retry later; 70: local workers died of faults)."""

from __future__ import annotations


class SearchError(Exception):
    """A configuration or infrastructure problem the user must fix (exit code 2)."""


class StudyMismatchError(SearchError):
    """A study of that name exists but was created with another direction or search space."""


class StudyNotFoundError(SearchError):
    """A worker or command names a study that does not exist in the storage."""


class StudyIncompleteError(SearchError):
    """The study exists, but ``search start`` has not finished creating it (no record or parent run yet)."""


class TemporaryFailure(SearchError):
    """What failed is the environment, not the input or a trial: the same command may work later (exit code 75)."""


class DatabaseUnavailableError(TemporaryFailure):
    """The database stayed unreachable (or the study's rows locked by another session) for longer
    than ``--db-outage-limit`` seconds."""


class WorkerFaultError(Exception):
    """``search start``'s local workers died of faults (killed by a signal, crashed, stalled) with the
    study unfinished and nobody else training it: one line and exit code 70, not 2 (the input is
    fine; the same command resumes the study once the cause is dealt with)."""


class EnvironmentFailure(TemporaryFailure):
    """This worker's machine cannot run trials (a full or read-only disk, a path too long): its
    trial is requeued, without spending a retry, and the worker stops."""


class TrialLostError(Exception):
    """Another process finished this trial first: a reaper took it for dead while its worker was cut off."""
