"""Subcommands that run and manage searches. Each reads like: resolve, run, report."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import click

from search.cli._group import cli
from search.cli._options import (
    find_study_options,
    gpu_sharing_options,
    location_options,
    option,
    outage_option,
    stall_timeout_option,
    tensorboard_option,
)


@cli.command()
@find_study_options
@option(
    "--gpus",
    help="all | 0,1,...: one trial per GPU at a time (--workers-per-gpu: K), each in its own process "
    "(indices into CUDA_VISIBLE_DEVICES when it is set).",
)
@gpu_sharing_options
@option(
    "--gpus-per-trial",
    type=int,
    default=1,
    help="Run each trial as a torch.distributed job over this many GPUs (from --gpus).",
)
@option(
    "--procs-per-trial",
    type=int,
    default=1,
    help="Run each trial as a torch.distributed job of this many CPU processes (gloo).",
)
@option(
    "--sharding",
    type=click.Choice(["ddp", "fsdp"]),
    default="ddp",
    show_default=True,
    help="How a trial of several processes splits the work: ddp keeps a whole model on every process; "
    "fsdp shards parameters, gradients and optimizer state over them (FSDP2), for models one GPU cannot hold.",
)
@option(
    "--nnodes",
    type=int,
    default=1,
    help="Spread each trial over this many nodes: run this command on each, with the same --rdzv-endpoint; "
    "each node adds its --gpus-per-trial GPUs or --procs-per-trial processes to the trial.",
)
@option(
    "--rdzv-endpoint",
    metavar="HOST:PORT",
    envvar="SEARCH_RDZV_ENDPOINT",
    show_envvar=True,
    help="With --nnodes: where the nodes of a trial meet (torchrun's c10d rendezvous; port 29400 if none).",
)
@option(
    "--rdzv-id",
    metavar="ID",
    help="With --nnodes: the id the nodes of one trial group share [the study's name and --worker-index].",
)
@option(
    "--wait-for-db",
    type=float,
    default=0,
    metavar="SECONDS",
    envvar="SEARCH_WAIT_FOR_DB",
    show_envvar=True,
    help="Wait this long for the database and the study to appear (a scheduler may start workers first); "
    "a study that `search start` is still creating is waited for at least 120 s in any case.",
)
@stall_timeout_option(None, "This worker's --stall-timeout (SECONDS or off) [the study's, set by `search start`].")
@option("--worker-index", type=int, default=0, hidden=True)
@option("--rank-of-group", is_flag=True, hidden=True)
@tensorboard_option
@outage_option
@location_options
@click.pass_context
def worker(ctx: click.Context, **kwargs: Any) -> None:
    """Join a running study from any machine and train until its budget is spent."""
    from search.api._worker import run_worker_command
    from search.coordination import set_outage_limit

    set_outage_limit(kwargs.pop("db_outage_limit"))
    signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGTERM, _interrupt_once)
    sys.exit(run_worker_command(kwargs, debug=ctx.obj["debug"]))


def _interrupt_once(*_: Any) -> None:
    """Stop on the first Ctrl-C or SIGTERM and ignore the ones after it.

    A terminal's Ctrl-C reaches the whole process group and `search start` forwards another a few
    milliseconds later: the second must not cut short the clean-up the first started (failing the
    running trial so that it resumes), wherever it lands.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


@cli.command()
def studies() -> None:
    """List the built-in studies."""
    import studies as st

    for name, description in st.list_studies().items():
        click.echo(f"{name:10s} {description}")


@cli.command()
@find_study_options
@option("--json", "as_json", is_flag=True, help="Print JSON.")
@location_options
def status(**kwargs: Any) -> None:
    """Where a study stands: counts, running trials, best value (any storage, any machine); once it is
    done, its champion."""
    import json
    from dataclasses import asdict

    from search.api._open import open_existing_with_locations
    from search.api._results import paused_checkpoints, paused_disk_bound
    from search.observation import snapshot
    from search.tracking import Tracker, read_champion

    as_json = kwargs.pop("as_json")
    coordinator, loc = open_existing_with_locations(kwargs)
    snap = snapshot(coordinator)
    champion = read_champion(Tracker(loc.tracking()), coordinator.study_name) if snap.done else None
    if as_json:
        click.echo(json.dumps({**asdict(snap), "done": snap.done,
                               "champion": None if champion is None else asdict(champion)}, indent=2))  # fmt: skip
        return
    click.echo("\n".join(snap.lines()))
    if snap.paused or snap.evicted:  # freeze-thaw: what the paused trials' checkpoints take here
        (folders, size), bound = paused_checkpoints(coordinator, loc.checkpoint_root), paused_disk_bound(coordinator)
        limit = "unbounded" if bound is None else f"bounded to {bound / 2**20:.3g} MiB (asha:disk)"
        click.echo(f"  paused trials' checkpoints under {loc.checkpoint_root}: {size / 2**20:.1f} MiB in {folders} "
                   f"folders (removed when the study ends), {limit}; {snap.evicted} evicted")  # fmt: skip
    if snap.done and champion is None:
        click.echo("  done; no champion registered yet (`search retrain` trains the best trial and registers it)")
    elif champion is not None:
        click.echo(f"  done; champion: {champion.model_name} version {champion.version} (retrained trial "
                   f"{champion.source_trial}), models:/{champion.model_name}@champion")  # fmt: skip


@cli.command()
@find_study_options
@option("--trial", "trial_number", type=int, help="Retrain this trial instead of the best one.")
@location_options
def retrain(**kwargs: Any) -> None:
    """Retrain the best (or a given) trial at full scale, test it once and register the model."""
    from search.api._open import open_existing_with_locations
    from search.api._output import print_retrain
    from search.observation import RetrainView
    from search.tracking import retrain_and_register

    trial_number = kwargs.pop("trial_number")
    coordinator, loc = open_existing_with_locations(kwargs)
    view = RetrainView(coordinator.read_record().metric)
    print_retrain(retrain_and_register(coordinator, loc, trial_number, progress=view))


@cli.command()
@find_study_options
@option("--version", "model_version", help="Registered model version [the champion].")
@option("--format", "fmt", type=click.Choice(["onnx", "torchscript"]), default="onnx", help="File format.")
@option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
        help="File to write [./<study>-v<version>.onnx or .pt].")  # fmt: skip
@option("--quantize", type=click.Choice(["int8"]),
        help="Also write an int8 copy of the ONNX file (<output>.int8.onnx, ONNX Runtime's dynamic quantization), "
             "measured against the float file first.")  # fmt: skip
@option("--quantize-tolerance", type=float, default=0.05, show_default=True, metavar="FRACTION",
        help="How much worse than the float file's the int8 file's test metric (the study's metric) may be, "
             "relative: 0.05 is 5%. Past it no int8 file is written and the command exits 2.")  # fmt: skip
@location_options
def export(**kwargs: Any) -> None:
    """Write the champion (or a version) as a file that runs without this project (docs/export.md).

    Retraining exported it, preprocessing included, with a dynamic batch dimension, and checked
    it against the PyTorch model on the test rows; this copies that file out of MLflow. With
    --quantize int8 it also quantizes the ONNX file and prints both files' size, latency per sample
    at batch 1 and test metrics; the int8 file is written only if the study's metric holds.
    """
    from search.api._open import open_existing_with_locations
    from search.api._results import export_model_file, quantize_model_file
    from search.exceptions import SearchError
    from search.tracking import FORMATS

    version, fmt, output = kwargs.pop("model_version"), kwargs.pop("fmt"), kwargs.pop("output")
    quantize, tolerance = kwargs.pop("quantize"), kwargs.pop("quantize_tolerance")
    if quantize and fmt != "onnx":
        raise SearchError(f"--quantize {quantize} quantizes the ONNX file; leave out --format {fmt}")
    coordinator, loc = open_existing_with_locations(kwargs)
    got, path = export_model_file(coordinator, loc, version, fmt, output)
    click.echo(f"wrote {path}: {fmt} ({FORMATS[fmt]}) of registered model {coordinator.study_name} version {got}")
    if not quantize:
        return
    report, int8_path = quantize_model_file(coordinator, loc, path, tolerance)
    click.echo(f"int8 (ONNX Runtime dynamic quantization) against float32, on the study's {report.rows} test rows; "
               "latency per sample at batch 1, one thread:")  # fmt: skip
    click.echo("\n".join(report.table()))
    if int8_path is None:
        raise SearchError(f"{report.verdict()}: int8 refused, no int8 file written ({path} stands)")
    click.echo(f"{report.verdict()}: wrote {int8_path}")


@cli.command("new-study")
@click.argument("name")
@option("-o", "--output", type=click.Path(path_type=Path), help="File to write [./NAME.py].")
def new_study(name: str, output: Path | None) -> None:
    """Write a documented study file to start your own study from."""
    from search.exceptions import SearchError
    from search.settings import MAX_NAME_LENGTH
    from studies.template import render_template

    if not name.isidentifier() or len(name) > MAX_NAME_LENGTH:
        raise SearchError(f"study name {name!r} must be a Python identifier (letters, digits, _) of at most "
                          f"{MAX_NAME_LENGTH} characters")  # fmt: skip
    path = output or Path(f"{name}.py")
    if path.exists():
        raise SearchError(f"{path} already exists; choose another -o")
    path.write_text(render_template(name))
    click.echo(f"wrote {path}; run it with: search start --study {path} --trials 20")
