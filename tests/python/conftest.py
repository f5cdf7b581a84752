"""Fixtures of the latte Python tests (helpers.py holds the data builders)."""

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
