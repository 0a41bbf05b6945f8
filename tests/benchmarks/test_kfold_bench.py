"""The k-fold benchmark's reading: per seed side by side, k-fold's paired wins and losses, medians."""

from __future__ import annotations

from benchmarks.kfold import sign_test, table


def _run(mode: str, seed: int, loss: float, accuracy: float) -> dict:
    return {"mode": mode, "seed": seed, "epochs": 180, "seconds": 60.0,
            "test": {"test_loss": loss, "test_accuracy": accuracy}}  # fmt: skip


def test_kfold_wins_are_lower_loss_and_higher_accuracy_ties_apart_and_an_unpaired_seed_is_left_out():
    runs = [_run("one-split", 0, 0.5, 0.8), _run("kfold", 0, 0.4, 0.8),
            _run("one-split", 1, 0.3, 0.9), _run("kfold", 1, 0.35, 0.85),
            _run("one-split", 2, 0.6, 0.7), _run("kfold", 2, 0.5, 0.75),
            _run("one-split", 3, 0.1, 0.99)]  # fmt: skip
    text = table(runs)
    assert len(text.splitlines()) == 1 + 3 + 2  # header, seeds 0-2 (3 has no k-fold run), two metrics
    assert "test_loss: k-fold wins 2, loses 1, ties 0 (sign test p = 1)" in text
    assert "test_accuracy: k-fold wins 1, loses 1, ties 1" in text
    assert "median one split 0.5000, k-fold 0.4000, median paired difference (k-fold - one) -0.1000" in text


def test_the_sign_test_is_two_sided_and_exact():
    assert sign_test(5, 0) == 2 / 32 and sign_test(0, 0) == 1.0 and sign_test(3, 3) == 1.0
