"""pyarrow's first array without importing pandas (rlwh.arrow_start), in a fresh interpreter:
the test process may hold pandas already."""

import importlib.util
import subprocess
import sys

import pytest

PROBE = """
import sys
{setup}
import pyarrow as pa
pa.array(["x"]); pa.array([1])
print("pandas" in sys.modules)
print(type(pa.table({{"a": [1]}}).to_pandas()).__name__)
"""


def _run(setup: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup)], capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def test_the_probe_skipped_and_pandas_still_there_when_asked_for():
    if importlib.util.find_spec("pandas") is None:
        pytest.fail("pandas is a test dependency: the test needs it installed")
    assert _run("") == ["True", "DataFrame"]  # what pyarrow does alone: the first array imports pandas
    assert _run("from rlwh.arrow_start import skip_pandas_probe; skip_pandas_probe()") == ["False", "DataFrame"]
