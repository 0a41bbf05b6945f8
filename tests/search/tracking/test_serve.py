"""`search serve`: the champion behind MLflow's model server, on the embedded SQLite stores and on
PostgreSQL ones (conftest.py), and the one line when there is nothing to serve."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
from http_helpers import answers, free_port


@pytest.mark.slow
def test_search_serve_answers_an_http_request_with_the_champions_prediction(champion):
    from sklearn.datasets import load_digits

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEARCH_", "MLFLOW_TRACKING", "MLFLOW_REGISTRY"))}
    errors = champion.project / f"serve-{port}.err"
    with open(errors, "w") as err:  # a file: a pipe nobody reads while the banner is awaited could fill
        proc = subprocess.Popen([sys.executable, "-m", "search", "serve", "--study", "resmlp", "--port", str(port),
                                 *champion.flags], cwd=champion.project, env={**env, "PYTHONUNBUFFERED": "1"},
                                stdout=subprocess.PIPE, stderr=err, text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    rows = load_digits(return_X_y=True)[0][:5].astype("float32")  # raw pixel rows
    banner: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # printed once the server answers /ping; EOF if the command ends first
            banner.append(line)
            if line.startswith("(Ctrl-C to stop)"):
                break
        assert banner and banner[-1].startswith("(Ctrl-C to stop)"), ("".join(banner), errors.read_text())
        assert answers(f"{url}/ping", timeout=2)
        request = urllib.request.Request(f"{url}/invocations", json.dumps({"inputs": rows.tolist()}).encode(),
                                         {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            served = np.asarray(json.loads(response.read())["predictions"])
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out = "".join(banner) + proc.communicate(timeout=60)[0]
    np.testing.assert_allclose(served, champion.predict(rows), rtol=1e-5, atol=1e-5)
    assert proc.returncode == 0, errors.read_text()
    assert f"serving models:/resmlp/1 (champion of study 'resmlp') at {url}" in out
    example = json.loads(out.split(" -d '", 1)[1].split("'", 1)[0])  # the curl line's body: a real row
    assert np.asarray(example["inputs"]).shape == (1, 64)
    assert not answers(f"{url}/ping", timeout=2)  # the server went with it


def test_serve_without_a_champion_or_study_is_one_line(sqlite_demo, warm_cli, tmp_path):
    proc = warm_cli("serve", *sqlite_demo.flags(), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: study 'demo' has no registered champion to serve; "
                                   "`search retrain` registers one")  # fmt: skip
    proc = warm_cli("serve", "--name", "nosuch", "--project-dir", str(sqlite_demo.project_dir), cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "nosuch" in proc.stderr
