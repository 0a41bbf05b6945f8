"""Freeze-thaw: asynchronous successive halving in promotion mode (ASHA, Li et al. 2020).

A trial trains to a rung (``min``, ``min * factor``, ... epochs, below the study's search epochs)
and goes on past it only while it is in the top ``1/factor`` of the trials that reached that rung;
otherwise it *pauses*: it ends as PRUNED in Optuna (what it is if it never resumes, and what the
samplers read: its curve so far), with its checkpoint at the rung kept and ``paused_at`` set. A
worker asking for work first resumes the best paused trial that has since earned a place in its
rung's top ``1/factor`` (the highest rung first), and only then starts a new trial. So a decision
taken early, with few trials to compare, is revisited as the rung fills: a trial is never lost to
an early bad comparison, only set aside until enough others have shown whether it is good.

The rule itself is in :mod:`search.settings._freeze_thaw`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from search.settings._freeze_thaw import DiskSize, to_resume
from search.settings._spec import Option, PrunerSpec, new_rung

if TYPE_CHECKING:
    from optuna.pruners import BasePruner


_DISK = "bound on the paused trials' checkpoints (e.g. 20GB; 0: none): past it the least promising lose theirs"


class Asha(PrunerSpec):
    name = "asha"
    options = {
        "min": Option(int, 1, "epochs of the first rung"),
        "factor": Option(int, 3, "reduction factor: the top 1/factor of a rung goes on"),
        "disk": Option(DiskSize, DiskSize(0), _DISK),
    }
    reads_running_trials = True  # the values of running trials at the rungs
    pauses = True

    @classmethod
    def built_types(cls) -> tuple[type, ...]:
        from search.settings._schedulers import AshaPruner

        return (AshaPruner,)

    def check(self, search_epochs: int) -> None:
        self.check_factor()
        if self["min"] < 1:
            raise self.refuse("min must be >= 1 epoch")
        if self["min"] >= search_epochs:
            raise self.refuse(f"min must be below the study's {search_epochs} search epochs")

    def build(self, search_epochs: int) -> BasePruner:
        from search.settings._schedulers import AshaPruner

        self.check(search_epochs)
        return AshaPruner(self["min"], self["factor"], search_epochs, self["disk"] or None)

    @classmethod
    def may_prune_at(cls, pruner: Any, step: int, last_asked: int | None, steps: Iterable[int]) -> bool:
        # At the epoch of a rung: that is the only epoch where a trial pauses.
        return step in pruner.rungs and (last_asked is None or new_rung(pruner.first, pruner.factor, step, last_asked))

    @classmethod
    def to_resume(cls, pruner: Any, values: Any, paused: Any, maximize: bool, spent: bool = False) -> int | None:
        return to_resume(values, paused, pruner.factor, maximize, spent)

    def describe(self) -> str:
        return (f"freeze-thaw (ASHA, promotion mode): trials pause at epochs {self['min']}, "
                f"{self['min'] * self['factor']}, ... unless in the top 1/{self['factor']} there, "
                "and resume once they earn it" + _bound(self["disk"]))  # fmt: skip


def _bound(disk: int) -> str:
    if not disk:
        return ""
    return f"; their checkpoints kept within {disk / 1e9:.3g} GB"
