"""pytest harness for the kvstash Python package: a real kvstashd (host
backend unless a test asks for cuda; kvstashd_process.Daemon) on a private
socket per test module.

The package under test is whatever `import kvstash` finds: the installed
wheel in CI (scripts/test_python.sh), or python/ with PYTHONPATH=python.
"""

from __future__ import annotations

import pytest

from kvstashd_process import Daemon


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.close()


@pytest.fixture
def private_daemon():
    """A daemon of the test's own, for tests that stop or restart it."""
    d = Daemon()
    yield d
    d.close()


@pytest.fixture
def client(daemon):
    import kvstash

    with kvstash.Client(socket=daemon.socket, timeout_ms=5000, name="pytest") as c:
        yield c


def has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True

