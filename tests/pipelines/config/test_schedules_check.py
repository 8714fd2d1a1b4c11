"""`gatehouse check` reads schedules.yaml like a pipeline file: the real CLI in a
subprocess on a temporary directory, a bad schedule an error with its file:line and
exit 1, and the pipelines that do not name it checked and loaded all the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pipelines.config import schedules

PIPELINE = """\
name: {name}
schedule: 15m
sources:
  - type: rss
    url: http://127.0.0.1:1/feed.xml
dispatch:
  type: none
"""

GOOD = """\
city:
  timezone: Europe/Berlin
  slots: ["08:30", "12:00", "17:30"]
"""


def gatehouse(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env |= {
        "GATEHOUSE_DATA_DIR": str(tmp_path / "data"),
        "GATEHOUSE_PIPELINES_DIR": str(tmp_path / "pipelines"),
        "GATEHOUSE_TELEGRAM__OPERATORS": "11",
        "GATEHOUSE_TELEGRAM__TOKEN": "123456789:check-test-token-not-real",
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=tmp_path, env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_check_names_a_bad_schedule_and_still_checks_the_other_pipelines(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "news.yaml").write_text(PIPELINE.format(name="news"))
    (folder / "digest.yaml").write_text(
        PIPELINE.format(name="digest") + "publish:\n  schedule: city\n"
    )
    schedules_file = folder / "schedules.yaml"
    schedules_file.write_text(GOOD.replace("12:00", "12:70"))
    code, out, err = gatehouse(tmp_path, "check", "--json")
    assert code == 1 and "Traceback" not in out + err, out + err
    checked = json.loads(out)
    bad = (
        f"{schedules_file}:3: city.slots.1: invalid time '12:70': hours run 00 to 23 and"
        ' minutes 00 to 59, like "23:30"'
    )
    assert checked["problems"] == [
        bad,
        f"{folder / 'digest.yaml'}:9: publish.schedule: schedule 'city' does not load:"
        f" 1 error(s):\n  {bad}",
    ]
    assert checked["pipelines"] == ["news"]

    schedules_file.write_text(GOOD)
    code, out, err = gatehouse(tmp_path, "check")
    assert (code, err) == (0, ""), out
    # A publish: block is not acted on yet: check says so, and the exit stays 0.
    assert out.strip().splitlines() == [
        f"warning: digest: {schedules.NOT_YET}",
        "ok: 2 pipeline(s): digest, news",
    ]
