"""``trainer`` must stay usable without the search stack: no optuna, no mlflow."""

import subprocess
import sys


def test_import_trainer_leaves_optuna_and_mlflow_out() -> None:
    code = (
        "import sys, trainer\n"
        "leaked = sorted(m for m in sys.modules if m.split('.')[0] in {'optuna', 'mlflow'})\n"
        "print(','.join(leaked))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
