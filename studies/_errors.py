"""Exceptions raised by :mod:`studies`."""

from __future__ import annotations


class StudyError(Exception):
    """Base class of every error the studies package raises on purpose."""


class StudyLoadError(StudyError):
    """A study name, study file or study object cannot be used.

    The message is one line that says what is wrong and where (file, attribute, choices).
    """


class DataError(StudyError, ValueError):
    """A data file cannot be read or split; the message names the file and the problem."""
