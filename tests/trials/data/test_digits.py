"""The digits workload reads scikit-learn's bundled data without importing scikit-learn."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from hyperfleet.trials.workloads.digits import load_digits, load_split


def test_digits_equal_scikit_learns_without_importing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from sklearn.datasets import load_digits as sklearn_digits

    want_x, want_y = sklearn_digits(return_X_y=True)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # an import of it would fail
    x, y = load_digits()
    assert x.shape == (1797, 64) and x.dtype == want_x.dtype and y.dtype == want_y.dtype
    assert np.array_equal(x, want_x) and np.array_equal(y, want_y)
    train_x, train_y, val_x, val_y = load_split(seed=0)
    assert (len(train_x), len(train_y), len(val_x), len(val_y)) == (1437, 1437, 360, 360)
    assert train_x.max() <= 1.0


def test_digits_fall_back_to_scikit_learn_when_its_file_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    x, y = load_digits()
    assert x.shape == (1797, 64) and sorted(set(y.tolist())) == list(range(10))
