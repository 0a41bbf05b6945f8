"""Search problems: what to tune, which model and data, and how to train it.

A search trial and a retrain make the same calls: ``study = get_study("resmlp")`` (or a path to
your own ``study.py``), then ``params = study.suggest(trial)`` (the only place a trial is seen),
``data = study.load_data()``, ``model = study.build_model(params, data)`` and
``config = study.train_config(params, study.search_fidelity)``; how the fit runs is
``infra = study_infra(study, params, study.search_fidelity)`` (the study's optional ``train_infra``).
Which params may change in the middle of a trial (population-based training) is the study's optional
``mutable_params``, read through ``mutable_params(study)`` and ``mutation_fields(study, old, new)``.
"""

from studies._base import Direction, Fidelity, Study, StudyData, as_bool, fidelities, study_infra
from studies._errors import DataError, StudyError, StudyLoadError
from studies._loader import load_study_file
from studies._mutable import mutable_params, mutation_fields
from studies._registry import get_study, list_studies

__all__ = [
    "DataError",
    "Direction",
    "Fidelity",
    "Study",
    "StudyData",
    "StudyError",
    "StudyLoadError",
    "as_bool",
    "fidelities",
    "get_study",
    "list_studies",
    "load_study_file",
    "mutable_params",
    "mutation_fields",
    "study_infra",
]
