"""Tests that need a real server (Dovecot, Chromium) skip locally but fail in CI.

    real.require(dovecot.skip_reason())      # in a fixture, before starting the server

A local run without the Debian package skips with the reason and how to install it. In
CI (`CI=true`, as .ci/run is run) the same test fails: there the package is installed by
.ci/run, so a missing one means the install broke, and a green run would hide it.
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require(missing: str | None) -> None:
    """Skip (locally) or fail (in CI) with `missing`, the reason the server cannot run."""
    if missing is None:
        return
    if in_ci():
        pytest.fail(f"{missing} (in CI a real-server test fails rather than skip)", pytrace=False)
    pytest.skip(missing)
