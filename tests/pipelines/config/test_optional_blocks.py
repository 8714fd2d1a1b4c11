"""An unknown field inside an optional block (`voice:`, `triage:`, `publish:`) names the
block's valid fields, as one at the top level does."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.config import spec

PIPELINE = """\
name: news
schedule: 15m
sources:
  - type: rss
    url: http://127.0.0.1:1/feed.xml
dispatch:
  type: none
"""


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("voice: {profil: v.yaml}\n", "8: voice.profil: unknown field 'profil'; valid: profile"),
        (
            "publish: {zone: UTC}\n",
            "8: publish.zone: unknown field 'zone'; valid: schedule, timezone, slots, days,"
            " min_gap, grace",
        ),
    ],
)
def test_an_unknown_field_in_an_optional_block_names_the_valid_ones(
    tmp_path: Path, block: str, error: str
) -> None:
    (tmp_path / "news.yaml").write_text(PIPELINE + block)
    errors = spec.load_dir(tmp_path).errors
    assert [str(e) for e in errors] == [f"{tmp_path / 'news.yaml'}:{error}"]
