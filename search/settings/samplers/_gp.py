"""A Gaussian-process sampler (Optuna's ``GPSampler``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.settings._spec import STARTUP, Option, SamplerSpec

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler


class Gp(SamplerSpec):
    name = "gp"
    uses_constraints = True
    options = {
        "startup": STARTUP,
        "pruned": Option(bool, True, "read each pruned trial as complete at the worst complete value (false: "
                         "Optuna's reading, which leaves pruned trials out)"),
        "until": Option(int, 0, "the trials after this many (logical: retries not counted) are drawn by the default "
                        "TPE (--sampler tpe); 0: every trial by the Gaussian process"),
    }  # fmt: skip

    def build(self, seed: int | None) -> BaseSampler:
        import optuna

        sampler: BaseSampler = optuna.samplers.GPSampler(seed=seed, n_startup_trials=self["startup"])
        if self["pruned"]:
            from search.settings._pruned_seen import PrunedAsWorst

            sampler = PrunedAsWorst(sampler)
        if not self["until"]:
            return sampler
        from search.settings._samplers import HandOff
        from search.settings.samplers._tpe import Tpe

        return HandOff(sampler, Tpe.parse("tpe").build(seed), until=self["until"])

    def describe(self) -> str:
        pruned = ", pruned trials read as the worst complete one" if self["pruned"] else ""
        then = f"; TPE from trial {self['until']} on" if self["until"] else ""
        return f"Gaussian process ({self['startup']} random trials first{pruned}{then})"
