"""Exceptions of :mod:`search`. Any of them ends a command with one line and exit code 2 (75: a temporary failure)."""

from __future__ import annotations


class SearchError(Exception):
    """A configuration or infrastructure problem the user must fix (exit code 2)."""


class StudyMismatchError(SearchError):
    """A study of that name exists but was created with another direction or search space."""


class StudyNotFoundError(SearchError):
    """A worker or command names a study that does not exist in the storage."""


class TemporaryFailure(SearchError):
    """What failed is the environment, not the input or a trial: the same command may work later (exit code 75)."""


class DatabaseUnavailableError(TemporaryFailure):
    """The database stayed unreachable for longer than ``--db-outage-limit`` seconds."""


class EnvironmentFailure(TemporaryFailure):
    """This worker's machine cannot run trials (a full or read-only disk, a path too long): its
    trial is requeued, without spending a retry, and the worker stops."""


class TrialLostError(Exception):
    """Another process finished this trial first: a reaper took it for dead while its worker was cut off."""
