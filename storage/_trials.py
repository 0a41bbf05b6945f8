"""A worker's copy of its study's trials, brought up to date in the transaction that reports epochs.

A pruner reads the whole study at every decision (Optuna's ``study.get_trials``): one more
transaction an epoch, and every trial's params, attributes and curve sent each time. Finished
trials never change, so this copy keeps them and fetches only the trials it has not seen finished;
and it does so in the transaction that stores the epochs' values when some are due, so an epoch
whose pruner is asked costs one transaction, not two. What the pruner sees is what a full read at
that moment returns (``tests/search/execution/test_pruning_equivalence.py``). The reporting trial itself is not read
back: its reporter holds its params and values; only its system attributes (rung records) are,
for the pruners that read them (``own_attrs``).
Readers that need of the other running trials only their params and states (a worker's sampler at
its claim, the median rule) keep those as first read with their params (``running=False``): with W
workers the W - 1 running trials are otherwise read in full at every claim and every question.
"""

from __future__ import annotations

import bisect
import datetime
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from storage._optuna_internals import rdb_models, trial_id, trial_time_columns
from storage._step_values import StepValues

if TYPE_CHECKING:
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial

_CHUNK = 500  # trial ids per IN (...): under every database's limit on bound parameters


class TrialList(list):  # type: ignore[type-arg]  # of FrozenTrial
    """A study's trials as read, with ``unfinished``: those not finished when read, in id order (a
    sampler that looks for running trials goes over these, not over every trial of a large study)."""

    unfinished: list[FrozenTrial]


class StudyTrials:
    """The trials of one study as of the last :meth:`report` that refreshed them, in trial order,
    all but the reporting trial itself (its reporter knows it): of that one only its system
    attributes (a pruner's rung records) are read."""

    def __init__(self, storage: RDBStorage, study_id: int) -> None:
        self._storage = storage
        self._study_id = study_id
        self._finished: dict[int, FrozenTrial] = {}  # by trial_id; a finished trial never changes
        self._order: list[int] = []  # every trial id seen, ascending
        self._pending: set[int] = set()  # ids seen but not yet read finished: each read looks at them again
        self._numbers = 0  # the trials numbered 0 .. _numbers - 1 have been seen
        self._dense = True  # numbers have no gaps (always, but for a database written by other means)
        self._view: tuple[list[int], list[FrozenTrial]] | None = None  # _listed(), until a read changes it
        self._others: dict[int, FrozenTrial] = {}
        self.own_system_attrs: dict[str, Any] = {}
        self.complete_steps = StepValues()  # the complete trials' values by step, for the median rule
        self.fetched = 0  # trials read in full, for tests and benchmarks

    def report(self, trial_id: int, values: Mapping[int, float], *, refresh: bool, running: bool = True,
               own_attrs: bool = True) -> None:  # fmt: skip
        """Store ``values`` (step -> value) for the trial and, if ``refresh``, read what changed.

        One transaction, safe to repeat after a lost connection (the values are stored again, the
        same). Storing checks, as Optuna does, that the trial is still running. With no values and
        ``refresh``, a read alone. ``running``: as for :meth:`refresh`. ``own_attrs``: read the
        trial's own system attributes into :attr:`own_system_attrs` (a pruner's rung records); the
        median rule and the others that read only the trial's values and the complete trials do
        not need them (one query fewer each epoch the pruner is asked, about a quarter of the read).
        """
        from storage._optuna_internals import scoped_session, store_steps

        with scoped_session(self._storage, True) as session:
            store_steps(self._storage, session, trial_id, values)
            if refresh:
                self._refresh(session, trial_id, running, own_attrs)

    def refresh(self, *, running: bool = True) -> TrialList:
        """Read what changed since the last read (a follower's view: no trial of its own); every trial.

        With ``running`` false, a running trial already read with its params is kept as read (its
        state is still read each time): for readers that need of running trials only their params
        and states (a sampler, the median rule), which a worker's suggestion stores at once. Each
        read then fetches the trials new or finished since the last, not all unfinished ones:
        with W workers, W - 1 running trials fewer at every claim and every pruner question.
        """
        from storage._optuna_internals import scoped_session

        with scoped_session(self._storage) as session:
            self._refresh(session, None, running, own_attrs=False)
        listed = TrialList(self._listed()[1])
        listed.unfinished = [self._others[tid] for tid in sorted(self._pending) if tid in self._others]
        return listed

    def with_own(self, own: FrozenTrial) -> list[FrozenTrial]:
        """The study's trials as last read, with ``own`` (the reporting trial) in its place."""
        own_id = trial_id(own)
        ids, trials = self._listed()
        at = bisect.bisect_left(self._order, own_id)
        if at == len(self._order) or self._order[at] != own_id:  # not seen yet
            return list(trials)
        pos = bisect.bisect_left(ids, own_id)
        return [*trials[:pos], own, *trials[pos + (pos < len(ids) and ids[pos] == own_id) :]]

    def _update_view(self, changed: list[int]) -> None:
        """Bring :meth:`_listed`'s lists up to date with the copies of ``changed`` ids (read, or dropped)."""
        if self._view is None:
            return
        ids, listed = self._view
        for tid in sorted(changed):
            at = bisect.bisect_left(ids, tid)
            present = at < len(ids) and ids[at] == tid
            if tid in self._others and present:
                listed[at] = self._others[tid]
            elif tid in self._others:
                ids.insert(at, tid)
                listed.insert(at, self._others[tid])
            elif present:
                del ids[at], listed[at]

    def _listed(self) -> tuple[list[int], list[FrozenTrial]]:
        """The ids and copies of the trials read, in id order; made once, then kept up to date with what each
        read changed (a list of 100,000 trials takes longer to make than the read of what changed)."""
        if self._view is None:
            ids = [tid for tid in self._order if tid in self._others]
            self._view = (ids, [self._others[tid] for tid in ids])
        return self._view

    def _refresh(self, session: Any, own_id: int | None, running: bool, own_attrs: bool) -> None:
        """Read what changed. A read that fails part way (a lost connection, retried by the caller) may
        have moved the count of trials seen past trials it did not read: the next one reads every
        trial's state, as after a gap in the numbers, so that none is missed."""
        try:
            self._read_changed(session, own_id, running, own_attrs)
        except BaseException:
            self._dense = False
            raise

    def _read_changed(self, session: Any, own_id: int | None, running: bool, own_attrs: bool) -> None:
        from storage._optuna_internals import system_attrs_query

        conn = session.connection()  # prebuilt statements, run without the ORM's work per query
        states = self._changes(conn)
        wanted = [
            tid
            for tid, state in states.items()
            if tid not in self._finished and tid != own_id and (running or not self._kept(tid, state))
        ]
        fresh: dict[int, FrozenTrial] = {}
        for start in range(0, len(wanted), _CHUNK):
            fresh.update(read_trials(session, wanted[start : start + _CHUNK]))
        for tid, trial in fresh.items():
            if trial.state.is_finished():
                self._finished[tid] = trial
                if trial.state.name == "COMPLETE":
                    self.complete_steps.add(trial.intermediate_values)
        if own_id is not None and own_attrs:
            rows = conn.execute(system_attrs_query(), {"trial": own_id})
            self.own_system_attrs = {key: json.loads(value) for key, value in rows}
        self.fetched += len(fresh)
        self._others.update(fresh)
        popped = self._others.pop(own_id, None) if own_id is not None else None
        self._update_view([*fresh, *([own_id] if own_id is not None and popped is not None else [])])
        self._pending = {tid for tid in states if tid not in self._finished} | (self._pending - set(states))

    def _changes(self, conn: Any) -> dict[int, Any]:
        """The states of the trials new since the last read and of those not yet read finished, by id.

        Finished trials never change, so only those need a look: O(running trials + new ones), where
        reading every trial's id and state took 70% of a pruner's decision at 100,000 trials. New
        trials are those numbered from the count already seen: a study's trials are numbered 0, 1,
        2, ... in the order their creations commit (each creator holds the study's row lock), so a
        trial never appears below a number already seen. Should the numbers have a gap (a database
        written by other means), every trial's id and state is read, as before, from then on; and
        so is it when more trials are pending than one statement may name.
        """
        from storage._optuna_internals import trial_changes_query

        query = trial_changes_query()
        if self._dense and len(self._pending) <= _CHUNK:
            params = {"study": self._study_id, "count": self._numbers, "ids": sorted(self._pending)}
            rows = conn.execute(query, params).all()
            new = sorted(number for _, number, _ in rows if number is not None and number >= self._numbers)
            if new == list(range(self._numbers, self._numbers + len(new))):
                self._numbers += len(new)
                states = _by_id(rows)
                added = [tid for tid in states if tid not in self._pending]
                if added and self._order and added[0] < self._order[-1]:
                    self._order = sorted([*self._order, *added])
                else:
                    self._order.extend(added)
                return states
        rows = conn.execute(query, {"study": self._study_id, "count": 0, "ids": []}).all()
        numbers = sorted(number for _, number, _ in rows if number is not None)
        self._dense, self._numbers = numbers == list(range(len(rows))), len(rows)
        states = _by_id(rows)
        self._order, self._view = list(states), None
        return states

    def _kept(self, trial_id: int, state: Any) -> bool:
        """Whether the copy of an unfinished trial may stand: read in the same state, with its params."""
        trial = self._others.get(trial_id)
        return trial is not None and trial.state == state and bool(trial.params)


def _by_id(rows: list[Any]) -> dict[int, Any]:
    """Trial states by id, in id order, of rows (trial_id, number, state)."""
    return {int(tid): state for tid, _, state in sorted(rows, key=lambda row: row[0])}


def read_trials(session: Any, trial_ids: list[int]) -> dict[int, FrozenTrial]:
    """The trials ``trial_ids`` (at most a few hundred) as Optuna's storage builds them, by id.

    Six plain queries (the trial rows, then each table of its details for all of them) and the
    trials built from their rows: Optuna's own read loads ORM objects and their relationships, a
    few times the CPU for the same trials (``tests/storage/test_trial_rows.py`` checks that both
    give equal trials).
    """
    from optuna.distributions import json_to_distribution
    from optuna.trial import FrozenTrial
    from sqlalchemy import select

    if not trial_ids:
        return {}
    models = rdb_models()
    start_utc, complete_utc = trial_time_columns()

    def rows(*columns: Any, order: Any) -> Any:
        return session.execute(select(*columns).where(columns[0].in_(trial_ids)).order_by(order))

    trial = models.TrialModel
    found = {
        tid: {
            "number": number,
            "state": state,
            "start": start,
            "complete": complete,
            "values": {},
            "params": [],
            "user": {},
            "system": {},
            "steps": {},
        }  # fmt: skip
        for tid, number, state, start, complete in rows(
            trial.trial_id,
            trial.number,
            trial.state,
            start_utc,
            complete_utc,
            order=trial.trial_id,
        )  # fmt: skip
    }
    value = models.TrialValueModel
    for tid, objective, stored, kind in rows(value.trial_id, value.objective, value.value, value.value_type,
                                             order=value.trial_value_id):  # fmt: skip
        if tid in found:  # (trials are never deleted, but a read must not fail if one were)
            found[tid]["values"][objective] = value.stored_repr_to_value(stored, kind)
    param = models.TrialParamModel
    for tid, name, stored, dist in rows(param.trial_id, param.param_name, param.param_value, param.distribution_json,
                                        order=param.param_id):  # fmt: skip
        if tid in found:
            found[tid]["params"].append((name, stored, dist))
    user, system = models.TrialUserAttributeModel, models.TrialSystemAttributeModel
    for model, key, order in ((user, "user", user.trial_user_attribute_id),
                              (system, "system", system.trial_system_attribute_id)):  # fmt: skip
        for tid, name, stored in rows(model.trial_id, model.key, model.value_json, order=order):
            if tid in found:
                found[tid][key][name] = json.loads(stored)
    step = models.TrialIntermediateValueModel
    for tid, at, stored, kind in rows(step.trial_id, step.step, step.intermediate_value, step.intermediate_value_type,
                                      order=step.trial_intermediate_value_id):  # fmt: skip
        if tid in found:
            found[tid]["steps"][at] = step.stored_repr_to_intermediate_value(stored, kind)

    distributions: dict[str, Any] = {}  # one object per distinct JSON: they are never changed
    built = {}
    for tid, f in found.items():
        dists = {name: distributions.get(dist) or distributions.setdefault(dist, json_to_distribution(dist))
                 for name, _, dist in f["params"]}  # fmt: skip
        values = f["values"]
        built[tid] = FrozenTrial(
            number=f["number"], state=f["state"], value=None,
            values=[values[i] for i in range(len(values))] if values else None,
            datetime_start=_local(f["start"]), datetime_complete=_local(f["complete"]),
            params={name: dists[name].to_external_repr(stored) for name, stored, _ in f["params"]},
            distributions=dists, user_attrs=f["user"], system_attrs=f["system"],
            intermediate_values=f["steps"], trial_id=tid,
        )  # fmt: skip
    return built


def _local(stored: datetime.datetime | None) -> datetime.datetime | None:
    """A stored trial time (naive UTC) as Optuna's storage hands it out: naive local time."""
    if stored is None:
        return None
    return stored.replace(tzinfo=datetime.UTC).astimezone().replace(tzinfo=None)
