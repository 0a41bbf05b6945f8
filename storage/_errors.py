"""Exceptions raised by :mod:`storage`. Messages never contain a password."""

from __future__ import annotations


class StorageError(Exception):
    """Infrastructure problem: a store cannot be reached, opened or written."""
