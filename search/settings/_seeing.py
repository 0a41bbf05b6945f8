"""A sampler that hands its inner sampler the study as seen through a selection of its trials."""

from __future__ import annotations

from typing import Any

from optuna.samplers import BaseSampler


class SeeingSampler(BaseSampler):
    """``inner`` samples from ``self.seen(study, trial)`` (the study whose trial reads pass through a
    selection: ``storage.study_seeing``); everything else, its settings and state included, is
    ``inner``'s own. TPE's window (``_windowed``) and its believer (``_believer``) are such samplers."""

    inner: BaseSampler

    def seen(self, study: Any, trial: Any) -> Any:
        raise NotImplementedError

    def before_trial(self, study: Any, trial: Any) -> None:
        self.inner.before_trial(study, trial)

    def infer_relative_search_space(self, study: Any, trial: Any) -> Any:
        return self.inner.infer_relative_search_space(self.seen(study, trial), trial)

    def sample_relative(self, study: Any, trial: Any, search_space: Any) -> Any:
        return self.inner.sample_relative(self.seen(study, trial), trial, search_space)

    def sample_independent(self, study: Any, trial: Any, param_name: str, param_distribution: Any) -> Any:
        return self.inner.sample_independent(self.seen(study, trial), trial, param_name, param_distribution)

    def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def __getattr__(self, name: str) -> Any:  # the inner sampler's settings and state
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
