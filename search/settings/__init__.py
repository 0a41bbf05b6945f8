"""What a search is and where it lives: stored settings, sampler and pruner specs, the study catalog, its space."""

from search.settings._algorithms import (
    describe,
    make_pruner,
    make_sampler,
    parse_pruner,
    parse_sampler,
    validate,
)
from search.settings._catalog import load_study, params_dict, parse_options, study_ref
from search.settings._freeze_thaw import PAUSED_AT_ATTR, PAUSED_EVICTED_ATTR
from search.settings._grid import (
    describe_grid,
    grid_differences,
    grid_points,
    grid_size,
    is_grid,
    parse_grid,
    point_key,
    resolve_grid,
)
from search.settings._locations import (
    CONFIG_FILE,
    ENV_ARTIFACTS,
    ENV_CHECKPOINTS,
    ENV_CONFIG,
    ENV_PROJECT,
    ENV_STORAGE,
    ENV_TENSORBOARD,
    ENV_TRACKING,
    Locations,
    location_env,
)
from search.settings._names import MAX_NAME_LENGTH, NAME_RULE, check_study_name, remove_study_dir, study_dir
from search.settings._prune_points import exploiting_spec, may_prune_at, pausing_spec, reads_running_trials
from search.settings._record import (
    FIRST_RUNG_ATTR,
    SearchSettings,
    StudyRecord,
    epochs_since_best,
    parse_duration,
    parse_patience,
    parse_stall_timeout,
    resolve_patience,
)
from search.settings._space import check_configuration, middle_params, parse_narrow, record_space, space_differences
from search.settings._spec import PrunerSpec, SamplerSpec
from search.settings.pruners import PRUNERS
from search.settings.samplers import SAMPLERS

__all__ = [
    "CONFIG_FILE",
    "ENV_ARTIFACTS",
    "ENV_CHECKPOINTS",
    "ENV_TENSORBOARD",
    "ENV_CONFIG",
    "ENV_PROJECT",
    "ENV_STORAGE",
    "ENV_TRACKING",
    "FIRST_RUNG_ATTR",
    "PAUSED_AT_ATTR",
    "PAUSED_EVICTED_ATTR",
    "PRUNERS",
    "PrunerSpec",
    "SAMPLERS",
    "SamplerSpec",
    "Locations",
    "MAX_NAME_LENGTH",
    "NAME_RULE",
    "check_configuration",
    "check_study_name",
    "remove_study_dir",
    "study_dir",
    "SearchSettings",
    "StudyRecord",
    "describe",
    "describe_grid",
    "grid_differences",
    "grid_points",
    "grid_size",
    "is_grid",
    "parse_grid",
    "point_key",
    "resolve_grid",
    "epochs_since_best",
    "load_study",
    "location_env",
    "make_pruner",
    "make_sampler",
    "may_prune_at",
    "exploiting_spec",
    "pausing_spec",
    "reads_running_trials",
    "params_dict",
    "parse_options",
    "parse_pruner",
    "parse_sampler",
    "parse_duration",
    "parse_patience",
    "parse_stall_timeout",
    "middle_params",
    "parse_narrow",
    "record_space",
    "resolve_patience",
    "space_differences",
    "study_ref",
    "validate",
]
