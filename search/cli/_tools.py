"""Quick checks around a search: ``search lr-find`` before it, ``search profile`` of one of its trials."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from search.cli._group import cli
from search.cli._options import find_study_options, load_config, location_options, option, study_options_option


@cli.command("lr-find")
@option("--study", required=True, help="Built-in study name or a path to a .py file.")
@study_options_option
@option(
    "--params",
    "param",
    multiple=True,
    metavar="NAME=VALUE",
    help="Hyperparameters to test with (repeatable); the rest sit in the middle of the study's space.",
)
@option("--steps", type=int, default=200, help="Optimizer steps of the sweep.")
@option("--start-lr", type=float, default=1e-7, help="First learning rate.")
@option("--end-lr", type=float, default=10.0, help="Last learning rate (the sweep stops earlier if the loss diverges).")
@option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
        help="Plot to write [./<study>-lr-find.html].")  # fmt: skip
@option("--apply", is_flag=True,
        help="Narrow the learning rate of new searches to the range found: writes `narrow` under [search.start] "
             "in search.toml (or --config); `search start` records it on the study it creates.")  # fmt: skip
@option("--lr-param", default="lr", help="The study's learning-rate parameter.")
@option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), envvar="SEARCH_CONFIG",
        is_eager=True, callback=lambda ctx, _, path: _defaults_from(ctx, path),
        help="TOML file with defaults for these flags, and that --apply writes to (created if missing) "
             "[./search.toml].")  # fmt: skip
def lr_find(**kwargs: Any) -> None:
    """The learning-rate range test on the study's data and model: a suggested rate and a range to search.

    The learning rate grows exponentially over --steps steps of the study's own training setup
    (optimizer, batch size, clipping, precision); the smoothed loss is plotted against it. The
    suggestion is where the loss falls fastest; the range runs from a tenth of it to the rate of
    the lowest loss.
    """
    import optuna

    import trainer
    from search.exceptions import SearchError
    from search.observation import lr_find_figure
    from search.settings import load_study, middle_params, parse_options, study_ref
    from studies import study_infra

    study = load_study(study_ref(kwargs["study"]), parse_options(kwargs["study_option"]))
    try:
        values = middle_params(study, parse_options(kwargs["param"]))
    except ValueError as exc:
        raise SearchError(f"--params: {exc}") from None
    params = study.suggest(optuna.trial.FixedTrial(values))
    data = study.load_data()
    model = study.build_model(params, data)
    config = study.train_config(params, study.search_fidelity)
    infra = study_infra(study, params, study.search_fidelity)
    started = time.perf_counter()
    try:
        found = trainer.lr_range_test(model, data.train, data.task, config, infra=infra, start_lr=kwargs["start_lr"],
                                      end_lr=kwargs["end_lr"], steps=kwargs["steps"])  # fmt: skip
    except ValueError as exc:
        raise SearchError(f"lr-find: {exc}") from None
    seconds = time.perf_counter() - started
    output = kwargs["output"] or Path(f"{study.name}-lr-find.html")
    output.parent.mkdir(parents=True, exist_ok=True)
    lr_find_figure(found, study.name).write_html(output, include_plotlyjs=True)
    click.echo(f"suggested learning rate {found.suggested:.2g}; range to search {found.low:.2g} .. {found.high:.2g}")
    shown = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
    click.echo(f"  {len(found.lrs)} steps in {seconds:.1f} s, {found.stopped}; with {shown}")
    click.echo(f"  plot: {output}")
    if kwargs["apply"]:
        _apply(study, kwargs["lr_param"], found.low, found.high, kwargs["config_file"])


def _defaults_from(ctx: click.Context, path: Path | None) -> Path | None:
    """search.toml's defaults for lr-find; a --config that does not exist yet is the file --apply creates."""
    return path if path is not None and not path.exists() else load_config(ctx, path)


def _apply(study: Any, param: str, low: float, high: float, config_file: Path | None) -> None:
    """Record the range where the next ``search start`` reads its defaults; it stores it on its study."""
    import os

    from search.cli._settings import set_command_default
    from search.exceptions import SearchError
    from search.settings import CONFIG_FILE, ENV_CONFIG, record_space
    from search.settings._space import check_narrow

    declared = record_space(study).get(param)
    if declared is None:
        raise SearchError(f"--apply: the study has no parameter {param!r}; give --lr-param")
    import json

    dist = json.loads(declared)["attributes"]
    low, high = max(low, float(dist["low"])), min(high, float(dist["high"]))  # within the study's own range
    entry = f"{param}={low:.3g}:{high:.3g}"
    try:
        check_narrow(study, {param: [float(f"{low:.3g}"), float(f"{high:.3g}")]})
    except ValueError as exc:
        raise SearchError(f"--apply: {exc}") from None
    path = config_file or Path(os.environ.get(ENV_CONFIG, CONFIG_FILE))
    set_command_default(path, "start", "narrow", [entry])
    click.echo(f"applied: {path} now narrows new searches to {entry} (`search start` records it on the study)")


@cli.command()
@find_study_options
@option("--trial", "trial_number", type=int, help="Profile this trial's configuration [the best trial].")
@option("--steps", type=int, default=5, help="Optimizer steps to record (after 1 skipped and 2 warm-up steps).")
@option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
        help="Directory for the trace and the table [./<study>-profile-trial-<n>].")  # fmt: skip
@location_options
def profile(**kwargs: Any) -> None:
    """A short run of a trial's configuration under torch.profiler: Chrome trace, top operators, throughput.

    CPU (and CUDA on a GPU) activity, memory and shapes over a few optimizer steps of the study's
    own training setup. Both files go to the trial's MLflow run too, under profile/.
    """
    from search.api._open import open_existing_with_locations
    from search.tracking import Tracker, pick_trial, profile_trial

    trial_number, steps, output = kwargs.pop("trial_number"), kwargs.pop("steps"), kwargs.pop("output")
    coordinator, loc = open_existing_with_locations(kwargs)
    trial = pick_trial(coordinator, trial_number)
    out_dir = output or Path(f"{coordinator.study_name}-profile-trial-{trial.number}")
    result = profile_trial(coordinator, Tracker(loc.tracking()), trial, out_dir, steps)
    click.echo(f"profiled trial {trial.number}: {result.steps} optimizer steps, "
               f"{result.samples_per_second:,.0f} samples/s under the profiler")  # fmt: skip
    click.echo("\n".join(result.table.splitlines()[:13]))
    click.echo(f"trace: {result.trace} (open in chrome://tracing or ui.perfetto.dev); table: {result.table_path}")
    if result.run_id:
        click.echo(f"logged under profile/ on MLflow run {result.run_id}")
