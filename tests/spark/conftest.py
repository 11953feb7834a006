"""One local SparkSession per test session, created the first time a test asks for it.

Starting Spark costs ~7 s, so every Spark test shares the ``spark`` fixture; tests that only
need pyarrow do not touch it and run without Java. Tests using it carry ``@pytest.mark.spark``
(deselect them with ``-m "not spark"``).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A ``local[2]`` SparkSession in UTC with 2 shuffle partitions and no UI."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("Spark needs Java 17: none on PATH and JAVA_HOME is not set; install it "
                    "(Debian: apt-get install openjdk-17-jre-headless)", pytrace=False)
    import pyspark
    # Spark's Python workers must run this interpreter, which has the project's packages.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("cedar-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    assert pyspark.__version__
    yield session
    session.stop()
