"""The study in its storage: create or resume it, and hand out trials within an exact budget."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import storage as st
from search.coordination._attrs import (
    BUDGET_ATTR,
    CHECKPOINT_ROOTS_ATTR,
    EPOCHS_ATTR,
    SPEC_ATTR,
    STOPPED_ATTR,
    WORKERS_ATTR,
)
from search.coordination._grid import queue_points
from search.coordination._interrupts import interrupts_deferred
from search.coordination._no_new_trials import epoch_budget_spent, near_epoch_budget
from search.coordination._paused import pop_retry, resume_paused
from search.coordination._reaper import RetryDeadTrial, reap_dead_trials
from search.coordination._resilience import outage_limit, retrying
from search.coordination._same_search import check_same_search
from search.exceptions import StudyIncompleteError, StudyNotFoundError
from search.settings import StudyRecord, make_pruner, make_sampler, pausing_spec, with_resolved_sampler

if TYPE_CHECKING:
    import optuna
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial
    from sqlalchemy.engine import Connection

log = logging.getLogger(__name__)


class Coordinator:
    """One worker's (or the follower's) connection to a study's storage."""

    def __init__(self, url: str, study_name: str, schema_checked: bool = False) -> None:
        """``schema_checked``: this one's parent opened ``url`` in full just now (``storage.open_optuna_storage``)."""
        import optuna

        # Optuna logs every created study and trial at INFO; our own output says what matters.
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.url = url
        self.study_name = study_name
        self.storage: RDBStorage = st.open_optuna_storage(url, schema_checked=schema_checked)
        self.on_reaped: Callable[[FrozenTrial], None] | None = None
        """Called with each dead trial this process fails (a worker ends its MLflow run)."""
        self.can_resume: Callable[[int], bool] = lambda number: True  # paused trial `number` (its checkpoint is here)
        self.claimed: int | None = None  # the trial this process took last, noted as it became RUNNING (_take)
        self._study_id: int | None = None

    def study_id(self) -> int:
        """The study's id (``KeyError``: no such study), read once, not at every count and attribute read."""
        if self._study_id is None:
            self._study_id = self.storage.get_study_id_from_name(self.study_name)
        return self._study_id

    @classmethod
    def existing(cls, url: str, study_name: str, schema_checked: bool = False) -> Coordinator:
        """The coordinator of a study that must exist; creates nothing (not even Optuna's tables) if not."""
        if not st.has_optuna_tables(url):
            raise StudyNotFoundError(
                f"study {study_name!r} does not exist in {st.describe(url)}; create it with `search start`"
            )
        coordinator = cls(url, study_name, schema_checked)
        coordinator.load()
        return coordinator

    def apply(self, record: StudyRecord) -> None:
        """Turn on heartbeats and bounded retries of dead trials, as the study record says."""
        self.storage.heartbeat_interval = record.settings.heartbeat_interval
        self.storage.grace_period = record.settings.grace_period
        self.storage.heartbeat_stale_trial_callback = RetryDeadTrial(self.storage, record.settings.max_retries)
        self.storage.failed_trial_callback = self.storage.heartbeat_stale_trial_callback

    # -- creating and loading -------------------------------------------------------------

    def exists(self) -> bool:
        try:
            self.study_id()
        except KeyError:
            return False
        return True

    def read_record(self) -> StudyRecord:
        attrs = self.study_user_attrs()
        if SPEC_ATTR not in attrs:  # or `search start` has not stored it yet (create_or_resume)
            raise StudyIncompleteError(
                f"study {self.study_name!r} was not created by hpsearch (no {SPEC_ATTR} attribute)"
            )
        return StudyRecord.from_json(attrs[SPEC_ATTR])

    def create_or_resume(self, record: StudyRecord, budget: int,
                         points: Sequence[dict[str, Any]] = ()) -> tuple[optuna.Study, bool]:  # fmt: skip
        """Create the study, or resume it after checking that it is the same search (``points``: a grid's)."""
        import optuna

        old = self.read_record() if self.exists() else None
        record = with_resolved_sampler(record, stored=old)[0]  # auto, if no caller resolved it
        if old is not None:
            check_same_search(self.study_name, old, record)
            resumed = replace(old, settings=record.settings)
            study = self.load(resumed)
            if resumed != old:  # settings that may change on resume (cli/_resume.py) are stored for new workers
                study.set_user_attr(SPEC_ATTR, resumed.to_json())
            self._set_budget(study, budget, points)
            for attr in (STOPPED_ATTR, EPOCHS_ATTR):  # a new run of the search: its own limits
                study.set_user_attr(attr, None)
            return study, False
        self.apply(record)
        directions = [optuna.study.StudyDirection[o.direction.upper()] for o in record.goals()]
        study = optuna.create_study(
            storage=self.storage, study_name=self.study_name, directions=directions,
            sampler=self._sampler(record, 0), pruner=self._pruner(record),
        )  # fmt: skip
        try:
            study.set_user_attr(SPEC_ATTR, record.to_json())
            self._set_budget(study, budget, points)
        except BaseException:
            self.delete()
            raise
        return study, True

    def _set_budget(self, study: optuna.Study, budget: int, points: Sequence[dict[str, Any]]) -> None:
        # With a grid's points, under the study lock: no claim sees the budget without the points that fill it.
        with self.lock() if points else contextlib.nullcontext():
            study.set_user_attr(BUDGET_ATTR, budget)
            if points:
                queue_points(study, points, budget - self.counts().logical)

    def load(self, record: StudyRecord | None = None, worker_ordinal: int = 0) -> optuna.Study:
        import optuna

        if not self.exists():
            raise StudyNotFoundError(
                f"study {self.study_name!r} does not exist in {st.describe(self.url)}; create it with `search start`"
            )
        record = record or self.read_record()
        self.apply(record)
        return optuna.load_study(
            study_name=self.study_name, storage=self.storage,
            sampler=self._sampler(record, worker_ordinal), pruner=self._pruner(record),
        )  # fmt: skip

    def join(self) -> int:
        """A number no other worker of this study had, under the study lock, to seed its sampler (nodes number their
        processes from 0, and one seed proposes the same trials). PostgreSQL: on the lock's connection alone."""

        def attempt() -> int:
            study_id = self.study_id()
            with self.lock() as conn:
                if conn is not None:
                    return st.count_up_study_attr(conn, study_id, WORKERS_ATTR)
                ordinal = int(self.storage.get_study_user_attrs(study_id).get(WORKERS_ATTR, 0))
                self.storage.set_study_user_attr(study_id, WORKERS_ATTR, ordinal + 1)
                return ordinal

        return retrying(attempt, "joining the study")

    def delete(self) -> None:
        import optuna

        optuna.delete_study(study_name=self.study_name, storage=self.storage)
        self._study_id = None

    @staticmethod
    def _sampler(record: StudyRecord, worker_ordinal: int) -> Any:
        # Workers with one seed would propose identical trials from identical histories.
        seed = None if record.settings.seed is None else record.settings.seed + 7919 * worker_ordinal
        return make_sampler(record.settings.sampler, seed)

    @staticmethod
    def _pruner(record: StudyRecord) -> Any:
        return make_pruner(record.settings.pruner, record.search_epochs)

    def checkpoint_roots(self) -> list[Path]:
        """Every checkpoint root a ``search start`` or ``search worker`` of this study used (its trials'
        folders are there)."""
        return [Path(root) for root in self.study_user_attrs().get(CHECKPOINT_ROOTS_ATTR, [])]

    def remember_checkpoint_root(self, root: Path) -> None:
        """Record ``root`` for ``search delete``; under the study lock if it is new (workers join at once)."""
        if str(root) in map(str, self.checkpoint_roots()):
            return
        with self.lock():
            roots = [str(r) for r in self.checkpoint_roots()]
            if str(root) not in roots:
                self.storage.set_study_user_attr(self.study_id(), CHECKPOINT_ROOTS_ATTR, [*roots, str(root)])

    def study_user_attrs(self) -> dict[str, Any]:
        """The study's user attributes, read now (a loaded ``optuna.Study`` keeps those it read)."""
        return self.storage.get_study_user_attrs(self.study_id())

    # -- the budget -----------------------------------------------------------------------

    def budget(self) -> int:
        return retrying(lambda: int(self.study_user_attrs().get(BUDGET_ATTR, 0)), "reading the budget")

    def counts(self) -> st.TrialCounts:
        def count() -> st.TrialCounts:
            return st.count_trials(st.bind_of(self.storage), self.study_id())

        return retrying(count, "counting trials")

    def claim(self, study: optuna.Study, trials: st.StudyTrials | None = None,
              trial_epochs: int | None = None) -> tuple[optuna.trial.Trial | None, st.TrialCounts]:  # fmt: skip
        """The next trial to run, or ``None`` when the budget is spent.

        The study is read once the trial exists, for its sampler (Optuna's per-trial cache, as
        ``study.ask()`` has it): through ``trials``, the worker's copy that reads only the trials
        it has not seen finished, if given; else through Optuna's storage.

        Counting and creating the trial (or taking a queued retry, or resuming a paused trial) happen
        under one study-wide lock, so W racing workers create exactly ``budget`` logical trials.
        Only that is under the lock: every worker waits for it in turn, so reaping dead trials
        (which takes the lock itself when it finds one) comes before, and the sampler's work
        (the slow part of ``study.ask()``) after. A lost connection retries each step alone;
        a trial whose creation committed unseen is reaped as one that never beat.
        With ``trial_epochs`` (one trial's epochs), near the end of an ``--epoch-budget`` the claim
        counts the epochs outside the lock before it takes a paused or new trial (``near_epoch_budget``).
        """
        import optuna

        started = time.perf_counter()
        self.reap(study)
        trial_id, counts, near = retrying(lambda: self._take(study, trial_epochs), "claiming a trial")
        if near is not None:  # spent: no new trial, and none resumed, in the claim again
            epoch_budget_spent(self, trials, near)
            trial_id, counts, _ = retrying(lambda: self._take(study, None), "claiming a trial")
        if trial_id is None:
            return None, counts

        def open_trial() -> optuna.trial.Trial:
            if self.storage.get_heartbeat_interval():
                self.storage.record_heartbeat(trial_id)
            # What study.ask() does once it has a trial id: the sampler looks at the study now.
            # Without a copy of its own, read through Optuna's per-process cache, so that it knows a
            # trial created on the lock's connection (its set_trial_param needs that; a worker's
            # suggestion stores params itself, see search.execution._suggest).
            if trials is not None:
                st.set_cached_trials(study, trials.refresh(running=False))  # params and states
            else:
                st.set_cached_trials(study, st.study_storage(study).get_all_trials(st.study_id(study), deepcopy=False))
            return optuna.Trial(study, trial_id)

        trial = retrying(open_trial, "claiming a trial")
        log.debug("claimed trial %d in %.1f ms", trial.number, 1000 * (time.perf_counter() - started))
        return trial, counts

    def _take(self, study: optuna.Study,
              trial_epochs: int | None) -> tuple[int | None, st.TrialCounts, dict[str, Any] | None]:  # fmt: skip
        """Under the study lock: the id of a queued retry, a queued new trial (a grid point), a paused
        trial or a new trial, unless the budget is spent (then a retry only); or none, and the
        follower's epoch count if near the ``--epoch-budget``.

        On PostgreSQL the trial is taken on the lock's own connection, so it commits only while the
        lock is held: a worker frozen here past the lock's hold time writes nothing when it wakes.
        """
        with self.lock() as conn, interrupts_deferred():  # Ctrl-C lands once `claimed` names the trial taken
            sid = st.study_id(study)
            counts, attrs = st.claim_counts(conn or self.storage.engine, sid, BUDGET_ATTR, EPOCHS_ATTR, STOPPED_ATTR)
            budget = int(attrs.get(BUDGET_ATTR) or 0)
            stopped = STOPPED_ATTR in attrs  # an early stop: no new or paused trial, retries only
            room = not stopped and counts.started < budget  # a new logical trial may start
            # Counted only if a paused or new trial could be taken: not in a lingering worker's poll.
            open_ = not stopped and (room or pausing_spec(study.pruner) is not None)
            near = trial_epochs is not None and open_ and near_epoch_budget(attrs.get(EPOCHS_ATTR), trial_epochs)
            taken, retries_only, waiting = None, near or not room, counts.state("WAITING")
            if waiting and retries_only:
                taken = pop_retry(self, conn, sid)
            elif waiting:
                taken = st.pop_waiting_trial(conn, sid) if conn is not None else st.pop_waiting_trial_id(study)
            if taken is None and near:
                self.claimed = None
                return None, counts, attrs.get(EPOCHS_ATTR)
            if taken is None and not stopped:  # freeze-thaw: a paused trial (after an early stop, none)
                taken = resume_paused(self, study, conn, spent=not room)
            if taken is None and room and counts.logical < budget:
                storage = st.study_storage(study)
                taken = storage.create_new_trial(sid) if conn is None else st.create_running_trial(conn, sid)
            self.claimed = taken
            return taken, counts, None

    def lock(self, wait: bool = True) -> contextlib.AbstractContextManager[Connection | None]:
        """The study lock, held at most about one grace period by a holder that stops answering. On
        SQLite a stopped holder keeps it until it ends: that is waited out as an outage is, up to
        ``--db-outage-limit``, then a temporary failure (``storage.LockTimeout``, exit code 75)."""
        hold = float(self.storage.grace_period or st.DEFAULT_HOLD_S)
        return st.study_lock(self.storage.engine, self.url, self.study_name, hold_s=hold, wait=wait,
                             wait_s=outage_limit(), storage=self.storage)  # fmt: skip

    def reap(self, study: optuna.Study) -> list[FrozenTrial]:
        """Fail trials whose worker stopped heartbeating and queue their retries (see ``_reaper``)."""
        dead = retrying(lambda: reap_dead_trials(self.storage, study, self.lock), "reaping dead trials")
        self.report_reaped(dead)
        return dead

    def reap_once(self, study: optuna.Study) -> None:
        """One reaping pass for a heartbeat thread, which must keep beating whatever happens elsewhere.

        It neither rides out an outage (it tries again soon) nor waits for a study lock held by
        another process, and it ends the dead trials' MLflow runs in a thread of their own: a
        tracking server that hangs or retries for minutes must not delay the next heartbeat.
        """
        dead = reap_dead_trials(self.storage, study, self.lock, wait=False)
        if dead and self.on_reaped is not None:
            threading.Thread(target=self.report_reaped, args=(dead,), name="end-dead-runs", daemon=True).start()

    def report_reaped(self, dead: list[FrozenTrial]) -> None:
        if self.on_reaped is not None:
            for trial in dead:
                self.on_reaped(trial)
