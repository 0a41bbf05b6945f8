"""Indexes this project adds to Optuna's tables, for the questions it asks of a large study.

Optuna indexes a study's trials only by study (``ix_trials_study_id``) and attributes by trial; the
claim, the reaper and the views ask for a study's trials *in a state* (the running ones, the queued
retries, the failures), for its last trial number, and for the few trials that carry one attribute
(``failed_trial``, ``paused_at``, ``resumed_from``, ``retry_history``): without these indexes each
question reads every trial of the study, or every attribute of every study. They index Optuna's
own columns, so Optuna neither sees nor minds them; they are made where a storage is opened in
full, on a new database or an existing one (a plain ``CREATE INDEX``: writers wait while it is
built, about a second per million rows), and looked up first, so that existing ones cost a catalog
read and no lock on a table.
"""

from __future__ import annotations

import sqlalchemy
from sqlalchemy.engine import Engine

INDEXES = {
    "ix_trials_study_id_state": ("trials", ("study_id", "state")),
    "ix_trials_study_id_number": ("trials", ("study_id", "number")),
    "ix_trial_user_attributes_key": ("trial_user_attributes", ("key",)),
    "ix_trial_system_attributes_key": ("trial_system_attributes", ("key",)),
}
"""Name -> (table, columns) of each index added to Optuna's tables."""


def ensure_indexes(engine: Engine) -> None:
    """Create the missing ones of ``INDEXES`` (``IF NOT EXISTS``: two processes may race to it)."""
    inspector = sqlalchemy.inspect(engine)
    for name, (table, columns) in INDEXES.items():
        if not inspector.has_table(table) or name in {ix["name"] for ix in inspector.get_indexes(table)}:
            continue
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(f"CREATE INDEX IF NOT EXISTS {name} ON {table} ({', '.join(columns)})"))
