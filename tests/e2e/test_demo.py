"""`make demo` brings up the control plane with vramgate registered from the chart and behaves as the README shows."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.e2e.harness import REPO_ROOT

pytestmark = pytest.mark.e2e


def test_demo_session_denies_the_70b_and_binds_the_8b() -> None:
    # Its own control plane in a child process (its ports are free ones): the README's session, once.
    run = subprocess.run([sys.executable, "-m", "tests.e2e.demo", "--check"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=300, env={**os.environ})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "export KUBECONFIG=" in run.stdout
    assert 'admission webhook "validate.vramgate.io" denied the request: deployment/llama70b: needs' in run.stdout
    assert "Try: " in run.stdout and "pod/llama8b admitted and bound to" in run.stdout
