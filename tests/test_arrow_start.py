"""pyarrow's first array without importing pandas (rlwh.arrow_start), in a fresh interpreter:
the test process may hold pandas already."""

import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

from rlwh.executors.local import die_with_parent
from rlwh.readers import kineto_decoding

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


@pytest.mark.slow  # three new interpreters, each importing pyarrow and pandas: ~1.2 CPU-s
def test_the_probe_skipped_and_pandas_still_there_when_asked_for():
    if importlib.util.find_spec("pandas") is None:
        pytest.fail("pandas is a test dependency: the test needs it installed")
    assert _run("") == ["True", "DataFrame"]  # what pyarrow does alone: the first array imports pandas
    assert _run("from rlwh.arrow_start import skip_pandas_probe; skip_pandas_probe()") == ["False", "DataFrame"]
    # rlwh.synth (the demo, the tests) makes arrays when imported: without pandas too
    assert _run("import rlwh.synth") == ["False", "DataFrame"]


# Run in a pool's process: builds arrays from lists, says whether pandas got imported.
BUILDS_ARRAYS = "[__import__('pyarrow').array(v) for v in (['x'], [1])] and 'pandas' in __import__('sys').modules"


def test_no_pandas_in_a_parse_worker():
    if importlib.util.find_spec("pandas") is None:
        pytest.fail("pandas is a test dependency: the test needs it installed")
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=die_with_parent,
                             initargs=(os.getpid(),)) as pool:
        assert pool.submit(eval, BUILDS_ARRAYS).result() is False


def test_no_pandas_in_a_kineto_decoding_process():
    if importlib.util.find_spec("pandas") is None:
        pytest.fail("pandas is a test dependency: the test needs it installed")
    pool = kineto_decoding._get_pool(2)
    try:
        assert pool.submit(eval, BUILDS_ARRAYS).result() is False
    finally:
        kineto_decoding.forget_pool()
