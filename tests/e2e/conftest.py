"""Fixtures: clusters (nginx + three `switchboard serve`) and the anyio backend.

A test that fails gets the tail of every node's log and nginx's error log attached to its report
(section "switchboard cluster logs"), for each cluster fixture it used.
"""

from __future__ import annotations

import pytest

from cluster import Cluster

# Elicitation and sampling timeout of the shared cluster: short, so the timeout cases take
# seconds; every answer in the other tests is given at once, well inside it.
SHARED_TIMEOUT_S = 3


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def cluster():
    """One cluster shared by a module's non-destructive tests."""
    with Cluster(
        name="shared",
        elicitation_timeout=f"{SHARED_TIMEOUT_S}s",
        sampling_timeout=f"{SHARED_TIMEOUT_S}s",
    ) as c:
        yield c


@pytest.fixture
def make_cluster():
    """Factory for a test's own cluster (destructive tests: nodes get killed). All are stopped
    when the test ends."""
    factory = ClusterFactory()
    yield factory
    for c in factory.made:
        c.stop()


class ClusterFactory:
    def __init__(self) -> None:
        self.made: list[Cluster] = []

    def __call__(self, **kwargs) -> Cluster:
        c = Cluster(**kwargs)
        self.made.append(c)
        c.start()
        return c


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        clusters = []
        for value in getattr(item, "funcargs", {}).values():
            if isinstance(value, Cluster):
                clusters.append(value)
            elif isinstance(value, ClusterFactory):
                clusters.extend(value.made)
        for c in clusters:
            report.sections.append((f"switchboard cluster logs ({c.name}, {c.workdir})", c.logs()))
    return report
