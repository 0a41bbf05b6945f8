"""The one-round-trip reads and writes on the claim and finish path, on SQLite and the real PostgreSQL."""

import optuna
import pytest
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

import storage


def _kind(statement: str) -> str:
    """A statement's verb; LIMIT for the silence limit a PostgreSQL transaction starts with."""
    return "LIMIT" if "idle_in_transaction_session_timeout" in statement else statement.split()[0].upper()


def _study(url: str) -> tuple[optuna.Study, optuna.storages.RDBStorage]:
    backend = storage.open_optuna_storage(url)
    return optuna.create_study(storage=backend, study_name="rows"), backend


def test_counts_and_attribute_come_back_together(url: str) -> None:
    study, backend = _study(url)
    try:
        empty, budget = storage.count_trials_and_attr(backend.engine, study._study_id, "budget")
        assert (empty.total, budget) == (0, None)  # no trials: the attribute row alone
        study.set_user_attr("budget", 7)
        study.tell(study.ask(), 1.0)
        study.tell(study.ask(), state=TrialState.FAIL)
        study.ask()
        retry = optuna.trial.create_trial(state=TrialState.WAITING, system_attrs={"failed_trial": 1})
        backend.create_new_trial(study._study_id, template_trial=retry)
        counts, budget = storage.count_trials_and_attr(backend.engine, study._study_id, "budget")
        assert budget == 7
        assert counts.by_state == {"COMPLETE": 1, "FAIL": 1, "RUNNING": 1, "WAITING": 1}
        assert counts.logical == 3  # the retry continues trial 1
        assert counts == storage.count_trials(backend.engine, study._study_id)
        study.set_user_attr("cleared", None)  # Optuna cannot delete an attribute: a cleared one is null
        claims, attrs = storage.claim_counts(backend.engine, study._study_id, "budget", "cleared", "unset")
        assert attrs == {"budget": 7} and claims.by_state == {"FINISHED": 2, "RUNNING": 1, "WAITING": 1}
        for name in ("total", "logical", "finished_logical", "retries"):
            assert getattr(claims, name) == getattr(counts, name), name
    finally:
        backend.engine.dispose()


def test_set_user_attrs_upserts_all_and_refuses_a_finished_trial(url: str) -> None:
    study, backend = _study(url)
    try:
        trial = study.ask()
        storage.set_user_attrs(backend, trial._trial_id, {"a": 1, "b": "x"})
        storage.set_user_attrs(backend, trial._trial_id, {"b": [1, 2], "c": None})
        assert backend.get_trial(trial._trial_id).user_attrs == {"a": 1, "b": [1, 2], "c": None}
        study.tell(trial, 0.5)
        with pytest.raises(UpdateFinishedTrialError):
            storage.set_user_attrs(backend, trial._trial_id, {"late": True})
        assert "late" not in backend.get_trial(trial._trial_id).user_attrs
    finally:
        backend.engine.dispose()


def test_set_trial_params_checks_every_distribution_with_one_lookup_per_param(url: str) -> None:
    """All of a trial's params in one transaction; each param's earlier distribution is looked up
    once per storage (and still refuses an incompatible one), so a later trial's params cost the
    trial's row and the inserts."""
    import sqlalchemy
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    study, backend = _study(url)
    x, opt = FloatDistribution(0.0, 1.0), CategoricalDistribution(["adam", "sgd"])
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # noqa: ANN001
        statements.append(_kind(statement))

    try:
        first, second, third = study.ask(), study.ask(), study.ask()
        storage.set_trial_params(backend, first._trial_id, [("x", 0.25, x), ("opt", 1.0, opt)])
        storage.set_trial_params(backend, second._trial_id, [("x", 0.5, x), ("opt", 0.0, opt)])  # looks both up
        sqlalchemy.event.listen(backend.engine, "before_cursor_execute", count)
        storage.set_trial_params(backend, third._trial_id, [("x", 0.75, x), ("opt", 0.0, opt)])
        sqlalchemy.event.remove(backend.engine, "before_cursor_execute", count)
        # the transaction's silence limit (PostgreSQL: storage._engine.end_silent_transactions), then the trial's row
        assert statements.count("SELECT") == 1, statements
        assert statements.count("LIMIT") == (1 if url.startswith("postgresql") else 0), statements
        assert backend.get_trial(third._trial_id).params == {"x": 0.75, "opt": "adam"}
        fourth = study.ask()
        with pytest.raises(ValueError, match="Cannot set different distribution kind"):
            storage.set_trial_params(backend, fourth._trial_id, [("y", 0.1, x), ("x", 1.0, opt)])
        assert backend.get_trial(fourth._trial_id).params == {}  # all or none
        study.tell(fourth, 0.5)
        with pytest.raises(UpdateFinishedTrialError):
            storage.set_trial_params(backend, fourth._trial_id, [("x", 0.1, x)])
    finally:
        backend.engine.dispose()


def test_store_steps_stores_overwrites_and_refuses_a_finished_trial(url: str) -> None:
    """Optuna's report, in one statement a value: NaN and infinities round-trip, a step reported
    again is overwritten, and a finished trial takes no more values (nor does a trial that does not
    exist)."""
    import math

    import sqlalchemy
    from optuna.storages._rdb.storage import _create_scoped_session

    study, backend = _study(url)
    statements: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # noqa: ANN001
        statements.append(_kind(statement))

    def report(trial_id: int, step: int, value: float, *more: tuple[int, float]) -> None:
        with _create_scoped_session(backend.scoped_session, True) as session:
            storage.store_steps(backend, session, trial_id, {step: value, **dict(more)})

    try:
        trial = study.ask()
        report(trial._trial_id, 0, 0.5)  # the engine's first connection may look at the server first
        sqlalchemy.event.listen(backend.engine, "before_cursor_execute", count)
        report(trial._trial_id, 1, float("nan"))
        sqlalchemy.event.remove(backend.engine, "before_cursor_execute", count)
        # the trial's state checked by the statement itself, after the transaction's silence limit
        assert statements == (["LIMIT", "INSERT"] if url.startswith("postgresql") else ["INSERT"]), statements
        report(trial._trial_id, 2, float("inf"), (3, float("-inf")))
        report(trial._trial_id, 0, 0.25)  # again: overwritten
        values = backend.get_trial(trial._trial_id).intermediate_values
        assert values[0] == 0.25 and math.isnan(values[1]) and values[2] == math.inf and values[3] == -math.inf
        assert len(values) == 4
        study.tell(trial, 0.5)
        with pytest.raises(UpdateFinishedTrialError):
            report(trial._trial_id, 4, 0.1)
        assert 4 not in backend.get_trial(trial._trial_id).intermediate_values
        with pytest.raises(KeyError):
            report(trial._trial_id + 1000, 0, 0.1)
    finally:
        backend.engine.dispose()


def test_finish_trial_tells_as_optuna_in_one_transaction(url: str) -> None:
    """State, value and attributes in one transaction (one commit); a pruned trial's value is its
    last report; the sampler's hook sees the running trial, and the state is written even when the
    hook fails; an already finished trial is handed back untouched."""
    import sqlalchemy

    study, backend = _study(url)
    commits: list[int] = []
    seen: list[tuple[int, str, list[float] | None]] = []

    def hook(frozen, values) -> None:  # noqa: ANN001
        seen.append((frozen.number, frozen.state.name, values))

    def failing_hook(frozen, values) -> None:  # noqa: ANN001
        raise RuntimeError("sampler bug")

    try:
        done, pruned, broken = study.ask(), study.ask(), study.ask()
        backend.set_trial_intermediate_value(pruned._trial_id, 3, 0.75)
        sqlalchemy.event.listen(backend.engine, "commit", lambda conn: commits.append(1))
        assert storage.finish_trial(backend, done._trial_id, TrialState.COMPLETE, 0.5, {"a": 1}, hook) is None
        assert len(commits) == 1
        assert storage.finish_trial(backend, pruned._trial_id, TrialState.PRUNED, None, {}, hook) is None
        with pytest.raises(RuntimeError, match="sampler bug"):
            storage.finish_trial(backend, broken._trial_id, TrialState.FAIL, None, {"why": "x"}, failing_hook)
        assert seen == [(0, "RUNNING", [0.5]), (1, "RUNNING", [0.75])]
        trials = {t.number: t for t in backend.get_all_trials(study._study_id)}
        assert (trials[0].state, trials[0].value, trials[0].user_attrs) == (TrialState.COMPLETE, 0.5, {"a": 1})
        assert trials[0].datetime_complete is not None
        assert (trials[1].state, trials[1].value) == (TrialState.PRUNED, 0.75)
        assert (trials[2].state, trials[2].value, trials[2].user_attrs) == (TrialState.FAIL, None, {"why": "x"})
        again = storage.finish_trial(backend, done._trial_id, TrialState.FAIL, None, {"b": 2}, hook)
        assert again is not None and again.state == TrialState.COMPLETE and again.user_attrs == {"a": 1}
        assert backend.get_trial(done._trial_id).user_attrs == {"a": 1}
        with pytest.raises(ValueError, match="cannot complete"):
            storage.finish_trial(backend, study.ask()._trial_id, TrialState.COMPLETE, float("nan"), {}, hook)
    finally:
        backend.engine.dispose()


def test_finish_trial_tells_several_values_and_constraints_as_optuna_reads_them(url: str) -> None:
    """A multi-objective trial's values and its constraint system attributes, in the one transaction:
    Optuna's own trial then has the values and constraints, and its best_trials the feasible front."""
    import sqlalchemy

    backend = storage.open_optuna_storage(url)
    study = optuna.create_study(storage=backend, study_name="front", directions=["minimize", "maximize"])
    commits: list[int] = []
    seen: list[dict[str, float]] = []

    def hook(frozen, values) -> None:  # noqa: ANN001
        seen.append(frozen.constraints)

    try:
        told = [study.ask() for _ in range(3)]
        sqlalchemy.event.listen(backend.engine, "commit", lambda conn: commits.append(1))
        for trial, values, slack in zip(told, ([1.0, 2.0], [0.5, 3.0], [0.1, 9.0]), (-1.0, 0.0, 0.5), strict=True):
            constraint = {storage.constraint_key("latency_ms<=2"): slack}
            storage.finish_trial(backend, trial._trial_id, TrialState.COMPLETE, values, {"feasible": slack <= 0}, hook,
                                 system_attrs=constraint)  # fmt: skip
        assert len(commits) == 3 and seen == [{"latency_ms<=2": -1.0}, {"latency_ms<=2": 0.0}, {"latency_ms<=2": 0.5}]
        loaded = optuna.load_study(study_name="front", storage=backend)
        assert [t.values for t in loaded.trials] == [[1.0, 2.0], [0.5, 3.0], [0.1, 9.0]]
        assert [t.constraints for t in loaded.trials] == [{"latency_ms<=2": v} for v in (-1.0, 0.0, 0.5)]
        assert [t.number for t in loaded.best_trials] == [1]  # 2 would dominate it, but misses the constraint
    finally:
        backend.engine.dispose()


def test_read_trials_builds_the_trials_optunas_storage_builds(url: str) -> None:
    """Every state, kind of param, value (inf too), intermediate value (nan and inf too), user and
    system attribute: the plain-query read gives trials equal to Optuna's, field by field."""
    import math

    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.storages._rdb.storage import _create_scoped_session

    study, backend = _study(url)
    try:
        for i in range(3):
            trial = study.ask()
            trial.suggest_float("lr", 1e-4, 1.0, log=True)
            trial.suggest_int("layers", 1, 8)
            trial.suggest_categorical("act", ["relu", None, 2.5])
            trial.suggest_float("drop", 0.0, 0.5, step=0.1)
            trial.set_user_attr("worker", {"host": f"h{i}", "ids": [i, None]})
            trial.storage.set_trial_system_attr(trial._trial_id, "completed_rung_0", 0.5 * i)
            for step, value in enumerate([1.0 / (i + 1), math.nan, math.inf, -math.inf]):
                trial.report(value, step)
            if i == 0:
                study.tell(trial, math.inf)
            elif i == 1:
                study.tell(trial, state=TrialState.PRUNED)
        study.tell(study.ask(), state=TrialState.FAIL)
        study.enqueue_trial({"lr": 0.01})  # WAITING, with fixed params in its system attributes
        study.add_trial(optuna.trial.create_trial(
            params={"lr": 0.1, "layers": 2, "act": None},
            distributions={"lr": FloatDistribution(1e-4, 1.0, log=True), "layers": IntDistribution(1, 8),
                           "act": CategoricalDistribution(["relu", None, 2.5])},
            value=-1.5,
        ))  # fmt: skip
        expected = backend.get_all_trials(study._study_id)
        with _create_scoped_session(backend.scoped_session) as session:
            got = storage.read_trials(session, [t._trial_id for t in expected])
        assert list(got) == [t._trial_id for t in expected]
        for ours, theirs in zip((got[t._trial_id] for t in expected), expected, strict=True):
            for field in ("values", "params", "distributions", "user_attrs", "system_attrs", "datetime_start",
                          "datetime_complete", "number", "state", "_trial_id"):  # fmt: skip
                assert getattr(ours, field) == getattr(theirs, field), field
            assert ours.intermediate_values.keys() == theirs.intermediate_values.keys()
            for step, value in theirs.intermediate_values.items():  # nan != nan: compare as text
                assert repr(ours.intermediate_values[step]) == repr(value)
        assert {t.state for t in expected} == set(TrialState)
    finally:
        backend.engine.dispose()


def test_queued_new_trials_count_apart_from_retries(url: str) -> None:
    """A grid point or an enqueued configuration is a logical trial no worker has started; a retry is not."""
    study, backend = _study(url)
    try:
        study.tell(study.ask(), state=TrialState.FAIL)
        retry = optuna.trial.create_trial(state=TrialState.WAITING, system_attrs={"failed_trial": 0})
        backend.create_new_trial(study._study_id, template_trial=retry)
        study.enqueue_trial({"x": 1.0})
        study.enqueue_trial({"x": 2.0})
        counts = storage.count_trials(backend.engine, study._study_id)
        claims, _ = storage.claim_counts(backend.engine, study._study_id)
        for c in (counts, claims):
            assert (c.logical, c.unstarted, c.started, c.state("WAITING")) == (3, 2, 1, 3)
        assert not counts.done(0) and not counts.done(1)  # the retry waits, whatever the budget
        with backend.engine.begin() as conn:  # after an early stop: the retry only
            assert storage.pop_waiting_trial(conn, study._study_id, retries_only=True) == study.trials[1]._trial_id
            assert storage.pop_waiting_trial(conn, study._study_id, retries_only=True) is None
        study.tell(study.trials[1].number, 0.5)
        assert storage.count_trials(backend.engine, study._study_id).done(1)  # the points wait for the next run
    finally:
        backend.engine.dispose()
