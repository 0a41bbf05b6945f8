"""TPE, Optuna's default: a density model of good and bad trials' parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from search.exceptions import SearchError
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
        "believe": Option(
            int,
            3,
            "once this many trials run beside the one sampled, each that has reported counts as "
            "complete, at the final value its curve ranks it at among the complete trials (where "
            "that epoch ranks them), not as bad; 0: never (nor in a study with constraints)",
        ),
        "candidates": Option(int, 24, "candidates scored per suggestion"),
        "window": Option(
            int,
            1000,
            "finished trials the model reads at most: the best tenth and the most recent "
            "(keeps a suggestion's time flat in large studies); 0: all",
        ),
    }

    @classmethod
    def parse(cls, text: str) -> Any:
        spec = super().parse(text)
        if spec["believe"] < 0:
            raise SearchError(f"bad value {spec['believe']} for sampler option tpe:believe in {text!r}: "
                              "0 (never) or the running trials from which it believes them")  # fmt: skip
        if 0 < spec["window"] < spec["startup"]:  # the model would never see its start-up trials
            raise SearchError(f"bad value {spec['window']} for sampler option tpe:window in {text!r}: "
                              f"0 (no window) or at least startup ({spec['startup']})")  # fmt: skip
        return spec

    def build(self, seed: int | None) -> BaseSampler:
        import optuna

        opts = self.values

        def tpe(multivariate: bool) -> TPESampler:
            return optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=opts["startup"], multivariate=multivariate,
                group=opts["group"] and multivariate, constant_liar=opts["liar"], n_ei_candidates=opts["candidates"],
            )  # fmt: skip

        from search.settings._samplers import ByConcurrency
        from search.settings._windowed import Windowed

        built = ByConcurrency(alone=tpe(True), together=tpe(False)) if opts["multivariate"] == "auto" else None
        sampler: BaseSampler = built or tpe(opts["multivariate"])
        if opts["believe"]:
            from search.settings._believer import Believer

            sampler = Believer(sampler, beside=opts["believe"])
        return Windowed(sampler, opts["window"]) if opts["window"] else sampler

    def describe(self) -> str:
        s = self.values
        models = {"auto": "joint model alone, per-parameter beside running trials", True: "joint model"}
        model = models.get(s["multivariate"], "per-parameter model")
        window = f", over at most {s['window']} finished trials" if s["window"] else ""
        liar = ", constant liar" if s["liar"] else ""
        liar += f", running trials believed from their curves once {s['believe']} run" if s["believe"] else ""
        return f"TPE ({model}{liar}, {s['startup']} random trials first{window})"
