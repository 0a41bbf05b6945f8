"""The suggestion-time benchmark (``benchmarks/bench_suggest.py``): one row per case, bad input refused."""

from __future__ import annotations

import pytest

from benchmarks.bench_suggest import SPACES, main


def test_it_prints_both_samplers_seconds_and_their_ratio_for_every_case(capsys):
    assert main(["--spaces", "floats,resnet", "--complete", "11,12", "--running", "0,2", "--reps", "1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [row[:3] for row in rows] == [
        [s, c, r] for s in ("floats", "resnet") for c in ("11", "12") for r in ("0", "2")
    ]
    for _, _, _, gp, tpe, ratio in rows:
        assert float(gp) > 0 and float(tpe) >= 0 and float(ratio) > 0


def test_an_unknown_space_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--spaces", "floats,nope"])
    assert exited.value.code == 2
    assert f"unknown space(s) nope; choose from {', '.join(SPACES)}" in capsys.readouterr().err
