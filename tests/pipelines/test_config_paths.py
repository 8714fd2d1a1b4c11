"""Every relative path in a pipeline file is read beside that file, wherever gatehouse
starts; a command naming a pipeline whose file failed to load says which errors it has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipelines import dispatch
from pipelines.config import spec
from pipelines.sources import folder as folder_source

PIPELINE = """\
name: notes
schedule: 1h
sources:
  - type: folder
    path: notes
draft:
  drafter: llm
  prompt: prompts/notes.txt
  output_schema: schemas/notes.json
dispatch:
  type: file
  path: out/notes
"""


def pipelines_dir(root: Path) -> Path:
    """A pipelines directory with one pipeline naming each kind of path relatively."""
    folder = root / "conf" / "pipelines"
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "first.md").write_text("# First note\n\nBody.\n")
    (folder / "prompts").mkdir()
    (folder / "prompts" / "notes.txt").write_text("Summarise {title}: {text}\n")
    (folder / "schemas").mkdir()
    (folder / "schemas" / "notes.json").write_text('{"type": "object"}')
    (folder / "notes.yaml").write_text(PIPELINE)
    return folder


def test_every_relative_path_is_read_beside_the_pipeline_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = pipelines_dir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = spec.load_dir(Path("..") / "conf" / "pipelines")
    assert result.errors == []
    pipeline = result.pipelines["notes"]
    source = pipeline.sources[0]
    assert isinstance(source, folder_source.Config)
    assert isinstance(pipeline.dispatch, dispatch.FileTarget)
    assert source.path.resolve() == folder / "notes"
    assert source.path.is_absolute() and pipeline.dispatch.path.is_absolute()
    assert pipeline.dispatch.path.resolve() == folder / "out" / "notes"
    assert pipeline.draft.prompt == folder / "prompts" / "notes.txt"
    assert pipeline.draft.output_schema == {"type": "object"}
    # The dedup scope keeps the path as written: what was seen stays seen.
    assert source.scope == "folder:notes"


def gatehouse(cwd: Path, folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env |= {"GATEHOUSE_PIPELINES_DIR": str(folder), "GATEHOUSE_DATA_DIR": str(cwd / "data")}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_dry_run_reads_a_relative_folder_beside_the_file_from_any_directory(
    tmp_path: Path,
) -> None:
    folder = pipelines_dir(tmp_path)
    done = gatehouse(tmp_path, folder, "dry-run", "notes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    shown = json.loads(done.stdout)
    assert shown["errors"] == [] and shown["fetched"] == 1
    assert [card["title"] for card in shown["cards"]] == ["First note"]


def test_dry_run_of_a_pipeline_whose_file_failed_names_its_errors(tmp_path: Path) -> None:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    city = folder / "city.yaml"
    city.write_text(
        textwrap.dedent("""\
            name: city
            schedule: 1h
            sources:
              - type: rss
                url: http://127.0.0.1:9/feed.xml
            dispatch: {type: none}
            nope: 1
            """)
    )
    done = gatehouse(tmp_path, folder, "dry-run", "city")
    assert done.returncode == 2
    assert "unknown pipeline" not in done.stderr and "none configured" not in done.stderr
    assert done.stderr.splitlines() == [
        "gatehouse dry-run: pipeline 'city' did not load: its file has errors"
        " (gatehouse check lists every file's):",
        f"  {city}:7: nope: unknown field 'nope'; valid: name, schedule, jitter,"
        " misfire_window, sources, dedup, filter, triage, draft, approval, voice, dispatch,"
        " publish",
    ]


def test_status_of_a_pipeline_whose_file_is_not_yaml_names_its_file(tmp_path: Path) -> None:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    city = folder / "city.yaml"
    city.write_text("name: city\nschedule: [1h\n")
    assert gatehouse(tmp_path, folder, "init").returncode == 0
    done = gatehouse(tmp_path, folder, "status", "city")
    assert done.returncode == 2
    first, *errors = done.stderr.splitlines()
    assert first.endswith(
        "pipeline 'city' did not load: its file has errors (gatehouse check lists every file's):"
    )
    assert errors and errors[0].startswith(f"  {city}:")
