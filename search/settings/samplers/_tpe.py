"""TPE, Optuna's default: a density model of good and bad trials' parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from search.settings._spec import STARTUP, Option, SamplerSpec

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler, TPESampler


class Tpe(SamplerSpec):
    name = "tpe"
    uses_constraints = True
    options = {
        "startup": STARTUP,
        "multivariate": Option(
            bool,
            "auto",
            "model the parameters jointly; auto: jointly while no other trial "
            "runs, per parameter while others do (each better there in the benchmark)",
            auto=True,
        ),  # fmt: skip
        "group": Option(bool, False, "split conditional spaces into groups (multivariate only)"),
        "liar": Option(bool, True, "constant liar: running trials count as bad, so parallel workers spread out"),
        "candidates": Option(int, 24, "candidates scored per suggestion"),
    }

    def build(self, seed: int | None) -> BaseSampler:
        import optuna

        opts = self.values

        def tpe(multivariate: bool) -> TPESampler:
            return optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=opts["startup"], multivariate=multivariate,
                group=opts["group"] and multivariate, constant_liar=opts["liar"], n_ei_candidates=opts["candidates"],
            )  # fmt: skip

        if opts["multivariate"] == "auto":
            from search.settings._samplers import ByConcurrency

            return ByConcurrency(alone=tpe(True), together=tpe(False))
        return tpe(opts["multivariate"])

    def describe(self) -> str:
        s = self.values
        models = {"auto": "joint model alone, per-parameter beside running trials", True: "joint model"}
        model = models.get(s["multivariate"], "per-parameter model")
        return f"TPE ({model}{', constant liar' if s['liar'] else ''}, {s['startup']} random trials first)"
