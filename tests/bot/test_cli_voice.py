"""`gatehouse voice` and the voice file in `gatehouse check`, as the real CLI in a
subprocess on a temporary directory: exit 1 on a block tell, 0 otherwise, 2 on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PIPELINE = """\
name: news
schedule: 15m
sources:
  - type: rss
    url: http://127.0.0.1:1/feed.xml
voice:
  profile: voice/city.yaml
dispatch:
  type: none
"""


@pytest.fixture
def pipelines_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "pipelines"
    (folder / "voice").mkdir(parents=True)
    (folder / "news.yaml").write_text(PIPELINE)
    (folder / "voice" / "city.yaml").write_text("remove: [delve]\n")
    return folder


def gatehouse(tmp_path: Path, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env |= {
        "GATEHOUSE_DATA_DIR": str(tmp_path / "data"),
        "GATEHOUSE_PIPELINES_DIR": str(tmp_path / "pipelines"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=tmp_path, env=env, input=stdin, capture_output=True, timeout=60,
    )  # fmt: skip
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_warn_tells_are_listed_with_hints_and_exit_0(tmp_path: Path) -> None:
    (tmp_path / "post.txt").write_text("Fares rose.\nWe delve into why.\n")
    code, out, err = gatehouse(tmp_path, "voice", "post.txt")
    assert (code, err) == (0, "")
    first, summary = out.strip().splitlines()
    assert first.startswith("warn   2:4     delve") and "'delve'" in first
    assert "Say what was looked at" in first
    assert summary == "✍️ 1 tell: delve"


def test_a_block_tell_exits_1_and_standard_input_is_read(tmp_path: Path) -> None:
    code, out, _ = gatehouse(tmp_path, "voice", "-", stdin=b"Certainly! Here is the post.")
    assert code == 1 and "block" in out and "chatbot opener" in out
    code, out, _ = gatehouse(tmp_path, "voice", "-", stdin=b"The council met on Tuesday.")
    assert (code, out.strip()) == (0, "no tells")


def test_the_pipelines_profile_and_a_profile_file_give_their_rules(
    tmp_path: Path, pipelines_dir: Path
) -> None:
    (tmp_path / "post.txt").write_text("We delve into it.")
    code, out, _ = gatehouse(tmp_path, "voice", "post.txt", "--pipeline", "news", "--json")
    assert code == 0 and json.loads(out)["tells"] == []
    (tmp_path / "strict.yaml").write_text("tune:\n  delve: {severity: block}\n")
    code, out, _ = gatehouse(tmp_path, "voice", "post.txt", "--profile", "strict.yaml", "--json")
    found = json.loads(out)
    assert code == 1 and found["blocked"] and found["tells"][0]["start"] == 3
    assert found["summary"] == "✍️ 1 tell: delve"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("voice", "missing.txt"), "cannot read missing.txt"),
        (("voice", "latin1.txt"), "not UTF-8"),
        (
            ("voice", "post.txt", "--pipeline", "newz"),
            "unknown pipeline 'newz'. Did you mean news?",
        ),
        (("voice", "post.txt", "--profile", "bad.yaml"), "bad.yaml:1: remove.0: unknown built-in"),
        (("voice",), "the following arguments are required: file"),
    ],
)
def test_bad_input_exits_2_saying_why(
    tmp_path: Path, pipelines_dir: Path, args: tuple[str, ...], said: str
) -> None:
    (tmp_path / "post.txt").write_text("Fine.")
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    (tmp_path / "bad.yaml").write_text("remove: [delv]\n")
    code, _, err = gatehouse(tmp_path, *args)
    assert code == 2 and said in err and "Traceback" not in err, err


def test_check_fails_on_a_bad_voice_rule_naming_its_file_and_line(
    tmp_path: Path, pipelines_dir: Path
) -> None:
    code, out, _ = gatehouse(tmp_path, "check")
    assert "voice" not in out  # the good profile is no problem
    (pipelines_dir / "voice" / "city.yaml").write_text(
        "rules:\n  - name: shout\n    regex: '(?=!)!'\n    hint: Once.\n"
    )
    code, out, _ = gatehouse(tmp_path, "check")
    assert code == 1
    assert f"{pipelines_dir / 'news.yaml'}:7: voice.profile: the voice file has 1 error(s):" in out
    assert f"{pipelines_dir / 'voice' / 'city.yaml'}:3: rules.0.regex: pattern '(?=!)!'" in out
    assert "cannot run on RE2" in out
