"""Following a study while it runs: counts, best value, rate and ETA.

One :class:`Snapshot` is what every view shows: the live view of ``search start``, its plain
lines when output is not a terminal (``_follow``), and ``search status`` (text or JSON).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from search.coordination import EPOCHS_ATTR, STOPPED_ATTR
from search.settings import describe_grid

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from search.coordination import Coordinator
    from search.settings import StudyRecord
    from storage import FinishWindow, StudyGlance, StudyTrials


@dataclass(frozen=True)
class RunningTrial:
    number: int
    worker: str | None
    host: str | None
    epoch: int
    """Last epoch the trial reported (0 before its first report); in a k-fold study, the folds it finished."""
    seconds: float
    """How long the trial has been running."""


@dataclass(frozen=True)
class Snapshot:
    """One look at a study; what `search status` prints and the live view draws."""

    study: str
    metric: str
    direction: str
    search_epochs: int
    budget: int
    finished: int
    running: int
    waiting: int
    complete: int
    pruned: int
    failed: int
    retried: int
    best_value: float | None
    best_trial: int | None
    trials_per_minute: float
    eta_seconds: float | None
    running_trials: list[RunningTrial]
    best_params: dict[str, Any] = field(default_factory=dict)
    recent_failures: list[tuple[int, str]] = field(default_factory=list)
    """The last few failed trials, newest last: number and the first line of the reason."""
    paused: int = 0
    """Of the pruned: paused trials (freeze-thaw) that a worker may still resume."""
    evicted: int = 0
    """Of the pruned: paused trials whose checkpoints went to keep within ``asha:disk``."""
    grid: dict[str, list[Any]] = field(default_factory=dict)
    """A grid search's values per parameter (``--sampler grid``); empty for other samplers."""
    folds: int = 0
    """K-fold cross-validation: each trial's folds (its running trials' ``epoch`` counts folds); 0: one split."""
    ended_early: dict[str, Any] | None = None
    """Why this run of the search takes no new trial (``--timeout``, ``--stop-at``, ``--epoch-budget``): ``reason``,
    ``asked`` and ``claimed``; None while it goes on to its budget."""
    epoch_budget: dict[str, Any] | None = None
    """This run's ``--epoch-budget``: ``epochs``, ``trained`` (as last counted) and ``per_second``; None without."""
    unstarted: int = 0
    """Of the waiting: queued new trials no worker has taken (grid points; after an early stop, the next run's)."""

    @property
    def done(self) -> bool:
        """Every trial of the budget has finished and none is running or queued for it."""
        return self.finished >= self.budget and self.running == 0 and self.waiting == self.unstarted

    def line(self) -> str:
        best = "-" if self.best_value is None else f"{self.best_value:.4g} (trial {self.best_trial})"
        eta = "done" if self.done else "-" if self.eta_seconds is None else duration(self.eta_seconds)
        budget = self.epoch_budget if not self.ended_early and not self.done else None  # after: in trials
        finished = f"{self.finished}/{self.budget} finished" if budget is None else (
            f"{self.finished} finished, {budget['trained']}/{budget['epochs']} epochs (--epoch-budget)")  # fmt: skip
        return (
            f"{self.study}: {finished}, {self.running} running, "
            f"{self.complete} complete, {self.pruned} pruned{self.paused_note()}, {self.failed} failed, best {best}, "
            f"{self.trials_per_minute:.1f} trials/min, ETA {eta}"
        )

    def paused_note(self) -> str:
        notes = [f"{n} {what}" for n, what in ((self.paused, "paused"), (self.evicted, "evicted")) if n]
        return f" ({', '.join(notes)})" if notes else ""

    def lines(self) -> list[str]:
        """The summary line, then one line per running trial."""
        grid = [f"  grid search: {describe_grid(self.grid)}; {self.waiting} queued"] if self.grid else []
        ended = [f"  {self.ended_note()}"] if self.ended_early else []
        running = (f"  {trial_line(t, self.search_epochs, self.folds)}" for t in self.running_trials)
        return [self.line(), *grid, *ended, *running]

    def ended_note(self) -> str:
        """``ended early: --stop-at 0.1 reached (best 0.04); no new trial after 3 of the 8 asked``."""
        ended = self.ended_early or {}
        return (f"ended early: {ended.get('reason')}; no new trial after {ended.get('claimed')} of the "
                f"{ended.get('asked')} asked")  # fmt: skip

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def trial_line(trial: RunningTrial, search_epochs: int, folds: int = 0) -> str:
    done = f"{trial.epoch}/{folds} folds done" if folds else f"epoch {trial.epoch}/{search_epochs}"
    where = f"{trial.host or '?'} ({trial.worker or '?'})"
    return f"trial {trial.number} on {where}, {done}, running {duration(trial.seconds)}"


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``: short enough for a status line."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def snapshot(coordinator: Coordinator, since: float | None = None, trials_seen: StudyTrials | None = None,
             record: StudyRecord | None = None) -> Snapshot:  # fmt: skip
    """Read the study once. ``since`` (epoch seconds) starts the window of the trial rate;
    without it the window is the whole search so far.

    A follower that reads it every second passes its ``trials_seen`` (finished trials are then
    read once, not at every poll) and the study's ``record``. Without it only the trials shown are
    read (the best, the running ones, the last failures) and of the others their counts and finish
    times, in SQL: a few hundred milliseconds at 100,000 trials, where reading every trial took minutes.
    """
    import storage as st

    counts = coordinator.counts()
    record = record or coordinator.read_record()
    maximize = record.maximize()[0]  # the first objective's
    trials = None if trials_seen is None else trials_seen.refresh()
    if trials is not None:
        seen = glance_of(trials, maximize, since, RECENT_FAILURES)
    else:
        seen = st.glance(coordinator.storage, coordinator.study_id(), maximize, since, RECENT_FAILURES)
    best = seen.best
    if len(record.goals()) > 1 or record.constraints:  # the --select rule among feasible trials: all of them read
        best = _best(trials or coordinator.storage.get_all_trials(coordinator.study_id(), deepcopy=False), record)
    budget = coordinator.budget()
    finished = counts.finished_logical
    left = counts.unstarted if finished >= budget else 0  # queued for the next run, after an early stop
    active = counts.state("RUNNING") + counts.state("WAITING") - left > 0
    rate = rate_of(seen.window, since, active)
    eta = 60.0 * (budget - finished) / rate if rate > 0 and budget > finished else None
    attrs = coordinator.study_user_attrs()
    epochs = attrs.get(EPOCHS_ATTR) or None
    if epochs and not attrs.get(STOPPED_ATTR):  # the epochs left, at this run's rate
        left, per_second = epochs["epochs"] - epochs["trained"], epochs.get("per_second")
        eta = max(0.0, left) / per_second if per_second else None
    now = time.time()
    running = [
        RunningTrial(t.number, t.user_attrs.get("worker"), t.user_attrs.get("host"),
                     len(t.intermediate_values) if record.folds else int(max(t.intermediate_values, default=0)),
                     now - _stamp(t.datetime_start, now))
        for t in seen.running
    ]  # fmt: skip
    return Snapshot(
        study=coordinator.study_name, metric=record.goals()[0].metric, direction=record.goals()[0].direction,
        search_epochs=record.search_epochs, budget=budget, finished=finished,
        running=counts.state("RUNNING"), waiting=counts.state("WAITING"), complete=counts.state("COMPLETE"),
        pruned=counts.pruned, failed=counts.failed, retried=counts.retries, paused=counts.paused,
        evicted=counts.evicted,
        best_value=None if best is None else best.values[0],
        best_trial=None if best is None else best.number, trials_per_minute=rate, eta_seconds=eta,
        running_trials=running, best_params={} if best is None else dict(best.params),
        recent_failures=[(t.number, _reason(t)) for t in seen.recent_failed], grid=record.grid, folds=record.folds,
        ended_early=attrs.get(STOPPED_ATTR) or None, epoch_budget=epochs, unstarted=counts.unstarted,
    )  # fmt: skip


RECENT_FAILURES = 3


def glance_of(trials: list[FrozenTrial], maximize: bool, since: float | None, k: int) -> StudyGlance:
    """What :func:`storage.glance` reads in SQL, picked from ``trials`` (all the study's, in trial order)."""
    from optuna.trial import TrialState

    import storage as st

    complete = [t for t in trials if t.state == TrialState.COMPLETE and t.values]
    pick = max if maximize else min
    best = pick(complete, key=lambda t: float(t.values[0])) if complete else None
    failed = [t for t in trials if t.state == TrialState.FAIL and t.datetime_complete is not None]
    failed.sort(key=lambda t: t.datetime_complete)  # type: ignore[arg-type, return-value]
    running = [t for t in trials if t.state == TrialState.RUNNING]
    return st.StudyGlance(best, running, failed[-k:] if k else [], _window(trials, since))


def _reason(trial: FrozenTrial) -> str:
    return (str(trial.user_attrs.get("fail_reason") or "no reason recorded").strip().splitlines() or [""])[0]


def _best(trials: list[FrozenTrial], record: StudyRecord) -> FrozenTrial | None:
    """The champion as the study selects it (``--select``, among trials that meet its constraints)."""
    from search.settings import champion_number

    number = champion_number(trials, record.maximize(), record.settings.select)
    return next((t for t in trials if t.number == number), None)


def _stamp(moment: datetime | None, default: float) -> float:
    return default if moment is None else moment.timestamp()


def _window(trials: list[FrozenTrial], since: float | None) -> FinishWindow:
    import storage as st

    starts = [t.datetime_start.timestamp() for t in trials if t.datetime_start]
    first = min(starts) if starts else None
    start = first if since is None else since
    if start is None:
        return st.FinishWindow(None, 0, None)
    recent = [t.datetime_complete.timestamp() for t in trials
              if t.datetime_complete is not None and t.datetime_complete.timestamp() >= start]  # fmt: skip
    return st.FinishWindow(first, len(recent), max(recent, default=None))


def trials_per_minute(trials: list[FrozenTrial], since: float | None, active: bool) -> float:
    """Trials finished per minute since ``since`` (default: the first trial's start); see :func:`rate_of`."""
    return rate_of(_window(trials, since), since, active)


def rate_of(window: FinishWindow, since: float | None, active: bool) -> float:
    """Trials finished per minute since ``since`` (default: the first trial's start).

    A search that is not running is measured up to its last finished trial, so the rate of a
    search that ended yesterday is its rate while it ran, not diluted by the idle day since.
    """
    start = window.first_start if since is None else since
    if not window.finished or start is None or window.last_finish is None:
        return 0.0
    end = time.time() if active or since is not None else window.last_finish
    return 60.0 * window.finished / max(1.0, end - start)
