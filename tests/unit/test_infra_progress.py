"""The Kafka launcher's Maven progress: sizes read from Maven's transfer lines."""

from __future__ import annotations

import pytest

from infra.kafka import downloaded_bytes


@pytest.mark.parametrize(("line", "size"), [
    ("[INFO] Downloaded from central: https://repo.maven.apache.org/maven2/a/b-1.jar (1.2 MB at 3.4 MB/s)", 1.2e6),
    ("Downloaded from central: https://repo.maven.apache.org/maven2/a/b-1.pom (3.1 kB at 12 kB/s)\n", 3100),
    ("[INFO] Downloaded from central: https://repo/x.jar (1,024 B at 2 kB/s)", 1024),
])
def test_downloaded_lines(line: str, size: float) -> None:
    assert downloaded_bytes(line) == pytest.approx(size)


@pytest.mark.parametrize("line", [
    "[INFO] Downloading from central: https://repo.maven.apache.org/maven2/a/b-1.jar",
    "[INFO] Copying kafka_2.13-4.1.1.jar to /x/libs/kafka_2.13-4.1.1.jar",
    "",
])
def test_other_lines(line: str) -> None:
    assert downloaded_bytes(line) is None
