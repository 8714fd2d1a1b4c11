"""A real-server test skips locally when its server is missing, and fails in CI."""

from __future__ import annotations

import pytest

from tests.fakes import real


def test_a_missing_server_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"dovecot not installed.*fails rather than"):
        real.require("dovecot not installed")


def test_a_missing_server_skips_locally_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^dovecot not installed$"):
        real.require("dovecot not installed")


def test_a_present_server_neither_skips_nor_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert real.require(None) is None
