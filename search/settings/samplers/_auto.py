"""``--sampler auto``, the default: the sampler a search's budget and workers were measured best with.

It is resolved once, as a study is created (:meth:`Auto.resolve`), and the study stores the sampler
it chose: its workers build that one, and resuming keeps it (its trials so far were drawn by it).
The rule comes from ``benchmarks/at_trials.py``, ``bench_search.py simulate`` and ``bench_search.py
service`` (docs/search-strategy.md): the Gaussian process (``gp``) ahead of the seeds' script with 1
to 4 workers at 40 and 100 trials, behind it with 8 workers; handing the trials after the first 100
to TPE (``gp:until=100``), where a Gaussian process's suggestions slow as trials grow, kept that lead
with one and two workers at 20, 50 and 126 FTE. The hand-off counts logical trials (retries not), so a
study resumed to a larger budget hands off too, whatever budget it was created with.
"""

from __future__ import annotations

from search.exceptions import SearchError
from search.settings._spec import SamplerSpec

GP_TRIALS = 100
"""The trials the Gaussian process draws before TPE draws the rest (``gp:until``)."""
GP_MAX_WORKERS = 4
"""The most workers at which ``auto`` picks the Gaussian process."""


class Auto(SamplerSpec):
    name = "auto"

    def resolve(self, workers: int | None, objectives: int = 1, folds: int = 0) -> tuple[str, str]:
        """The sampler spec to store, and why, for a search by ``workers`` workers (None: not known
        here, e.g. ``--workers 0`` and workers that join from other nodes). Not by its budget: the
        hand-off to TPE counts logical trials, so the same spec fits any budget, a larger one on resume too."""
        if objectives > 1:
            return "tpe", f"{objectives} objectives (the Gaussian process was measured on one)"
        if folds:
            return "tpe", "a k-fold study (the Gaussian process was measured on per-epoch curves)"
        if workers is None:
            return "tpe", "no local workers: how many join is not known here"
        if workers > GP_MAX_WORKERS:
            return "tpe", f"{workers} workers are more than {GP_MAX_WORKERS}"
        return f"gp:until={GP_TRIALS}", f"{workers} worker{'s' * (workers != 1)}"

    def build(self, seed: int | None) -> None:  # type: ignore[override]
        raise SearchError("--sampler auto is resolved as a study is created; this study stored it unresolved")

    def describe(self) -> str:
        return (f"auto: with at most {GP_MAX_WORKERS} workers the Gaussian process for the first {GP_TRIALS} trials, "
                f"then TPE (gp:until={GP_TRIALS}); else TPE")  # fmt: skip


def auto_line(spec: str, why: str) -> str:
    """The line ``search start`` prints for what ``auto`` chose."""
    return f"sampler: {spec}, chosen by --sampler auto for {why} (give --sampler to choose another)"
