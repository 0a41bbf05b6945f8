"""Growing a study to many trials fast, by copying rows of Optuna's tables (benchmarks only).

``benchmarks/bench_large_study.py`` measures the service at 100,000 trials; running that many
through the worker's path would take hours, so it runs a few and copies their rows, as Optuna
itself writes them (PostgreSQL only: ``generate_series``). Never used by the service.
"""

from __future__ import annotations

import sqlalchemy
from sqlalchemy.engine import Engine

_COPIES = [
    """INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete)
       SELECT g, t.study_id, t.state, t.datetime_start + (g - t.number) * interval '1 second',
              t.datetime_complete + (g - t.number) * interval '1 second'
       FROM generate_series(:k, :n - 1) AS g JOIN trials t ON t.study_id = :sid AND t.number = g % :k""",
    """CREATE TEMP TABLE copies AS SELECT c.trial_id AS new_id, t.trial_id AS old_id
       FROM trials c JOIN trials t ON t.study_id = c.study_id AND t.number = c.number % :k
       WHERE c.study_id = :sid AND c.number >= :k""",
    """INSERT INTO trial_params (trial_id, param_name, param_value, distribution_json)
       SELECT m.new_id, p.param_name,
              CASE p.param_name WHEN 'x' THEN -2 + 4 * random() ELSE exp(ln(0.001) + random() * ln(500)) END,
              p.distribution_json
       FROM copies m JOIN trial_params p ON p.trial_id = m.old_id""",
    """INSERT INTO trial_values (trial_id, objective, value, value_type)
       SELECT m.new_id, v.objective, v.value * (0.5 + random()), v.value_type
       FROM copies m JOIN trial_values v ON v.trial_id = m.old_id""",
    """INSERT INTO trial_intermediate_values (trial_id, step, intermediate_value, intermediate_value_type)
       SELECT m.new_id, v.step, v.intermediate_value * (0.5 + random()), v.intermediate_value_type
       FROM copies m JOIN trial_intermediate_values v ON v.trial_id = m.old_id""",
    """INSERT INTO trial_user_attributes (trial_id, key, value_json)
       SELECT m.new_id, a.key, a.value_json FROM copies m JOIN trial_user_attributes a ON a.trial_id = m.old_id""",
    """INSERT INTO trial_system_attributes (trial_id, key, value_json)
       SELECT m.new_id, a.key, a.value_json FROM copies m JOIN trial_system_attributes a ON a.trial_id = m.old_id""",
    """INSERT INTO trial_heartbeats (trial_id, heartbeat)
       SELECT m.new_id, h.heartbeat FROM copies m JOIN trial_heartbeats h ON h.trial_id = m.old_id""",
]


def copy_trials_for_benchmarks(engine: Engine, study_id: int, n: int, k: int) -> None:
    """Add trials ``k .. n-1`` to the study, each a copy of trial ``number % k``: its params redrawn
    (``x`` uniform in [-2, 2], any other log-uniform in [0.001, 0.5]), its values rescaled."""
    with engine.begin() as conn:
        for statement in _COPIES:
            conn.execute(sqlalchemy.text(statement), {"k": k, "n": n, "sid": study_id})
