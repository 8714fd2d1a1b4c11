"""A pipeline's voice file: rules added, removed and tuned, as the pipeline loads them,
and every bad rule an error naming the voice file's line and what is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.config import spec, voice
from pipelines.voice import builtin, lint

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

CITY = """\
remove: [delve, stock-verbs]
tune:
  em-dashes: {max: 0, severity: block, hint: No em dash at all here.}
  tapestry: {severity: note, label: the T word}
rules:
  - name: cliche-city
    words: [vibrant city, "city that never sleeps"]
    severity: warn
    hint: Name the street instead.
  - name: shouting
    regex: '!{2,}'
    severity: block
    hint: One exclamation mark at most.
  - name: no-hashtags
    count: hashtags
    max: 0
    severity: note
    hint: This channel uses no hashtags.
"""


def _pipeline(tmp_path: Path, profile: str) -> tuple[spec.Pipeline | None, list[str]]:
    (tmp_path / "voice").mkdir(exist_ok=True)
    (tmp_path / "voice" / "city.yaml").write_text(profile)
    (tmp_path / "news.yaml").write_text(PIPELINE)
    loaded = spec.load_dir(tmp_path)
    return loaded.pipelines.get("news"), [str(error) for error in loaded.errors]


def test_a_voice_file_adds_removes_and_tunes_rules(tmp_path: Path) -> None:
    pipeline, errors = _pipeline(tmp_path, CITY)
    assert errors == [] and pipeline is not None and pipeline.voice is not None
    assert pipeline.voice.profile is not None
    assert pipeline.voice.profile.file == tmp_path / "voice" / "city.yaml"
    rules = pipeline.voice.rules
    names = [rule.name for rule in rules.rules]
    assert "delve" not in names and "stock-verbs" not in names
    assert names[-3:] == ["cliche-city", "shouting", "no-hashtags"]
    assert len(names) == len(builtin.RULES) - 2 + 3
    text = "We delve into a vibrant city \u2014 a tapestry!! #news"
    tells = lint.lint(text, rules)
    assert {hit.rule: hit.severity for hit in tells.hits} == {
        "cliche-city": "warn",
        "em-dashes": "block",  # one dash, over the tuned max of 0
        "tapestry": "note",
        "bustling": "note",  # the built-in rule has "vibrant"
        "shouting": "block",
        "exclamations": "note",
        "no-hashtags": "note",
    }
    assert tells.blocked
    dash = next(hit for hit in tells.hits if hit.rule == "em-dashes")
    assert dash.hint == "No em dash at all here."
    assert "the T word" in lint.summary(tells)


def test_no_voice_block_or_an_empty_file_keeps_the_built_in_rules(tmp_path: Path) -> None:
    pipeline, errors = _pipeline(tmp_path, "")
    assert errors == [] and pipeline is not None and pipeline.voice is not None
    assert [r.name for r in pipeline.voice.rules.rules] == list(builtin.NAMES)
    assert spec.Pipeline.model_fields["voice"].default is None


def test_builtin_false_keeps_only_the_files_own_rules(tmp_path: Path) -> None:
    own = "builtin: false\nrules:\n  - {name: mine, words: [x], hint: Mine.}\n"
    pipeline, errors = _pipeline(tmp_path, own)
    assert errors == [] and pipeline is not None and pipeline.voice is not None
    assert [r.name for r in pipeline.voice.rules.rules] == ["mine"]


@pytest.mark.parametrize(
    ("profile", "where", "said"),
    [
        ("rules:\n  - name: bad\n    regex: '(?<=a)b'\n    hint: x\n", "3: rules.0.regex:",
         "cannot run on RE2 (invalid perl operator: (?<=); RE2 has no lookahead"),
        ("rules:\n  - name: bad\n    regex: 'a*'\n    hint: x\n", "3: rules.0.regex:",
         "matches an empty text"),
        ("remove:\n  - delve\n  - delv\n", "3: remove.1:",
         "unknown built-in rule 'delv'; valid: delve, tapestry,"),
        ("tune:\n  delv: {severity: note}\n", "2: tune.delv:", "unknown built-in rule 'delv'"),
        ("rules:\n  - {name: x, words: [a], hint: h,\n     severity: loud}\n",
         "3: rules.0.severity:", "must be one of 'note', 'warn' or 'block'"),
        ("tune:\n  delve: {max: 2}\n", "2: tune.delve.max:",
         "'delve' is not a count; max tunes em-dashes,"),
        ("remove: [delve]\ntune:\n  delve: {severity: note}\n", "3: tune.delve:",
         "'delve' is not kept here"),
        ("rules:\n  - {name: delve, words: [a], hint: h}\n", "2: rules.0.name:",
         "'delve' is a built-in rule: remove it first"),
        ("rules:\n  - {name: a, words: [a], hint: h}\n  - {name: a, words: [b], hint: h}\n",
         "3: rules.1.name:", "'a' is taken"),
        ("rules:\n  - {name: a, count: emoji, hint: h}\n", "2: rules.0:",
         "count and max go together"),
        ("rules:\n  - {name: a, count: smileys, max: 1, hint: h}\n", "2: rules.0.count:",
         "must be one of 'em_dashes', 'exclamations'"),
        ("rules:\n  - {name: a, words: [a], regex: b, hint: h}\n", "2: rules.0:",
         "exactly one of words"),
        ("rules:\n  - {name: a, words: [a], hint: ''}\n", "2: rules.0.hint:", "one line"),
        ("rules:\n  - {name: a, words: [' '], hint: h}\n", "2: rules.0.words:",
         "at least one non-empty word"),
        ("rules:\n  - {name: a, words: [], hint: h}\n", "2: rules.0.words:",
         "at least one non-empty word"),
        ("rules:\n  - {name: Big Rule, words: [a], hint: h}\n", "2: rules.0.name:",
         "invalid rule name 'Big Rule'"),
        ("colour: blue\n", "1: colour:", "unknown field 'colour'; valid: builtin, remove,"),
        ("- delve\n", "1:", "expected a mapping of voice fields"),
    ],
)  # fmt: skip
def test_a_bad_rule_names_the_voice_files_line_and_what_is_valid(
    tmp_path: Path, profile: str, where: str, said: str
) -> None:
    pipeline, errors = _pipeline(tmp_path, profile)
    assert pipeline is None and len(errors) == 1, errors
    first, *listed = errors[0].split("\n  ")
    assert first == f"{tmp_path / 'news.yaml'}:7: voice.profile: the voice file has 1 error(s):"
    assert listed[0].startswith(f"{tmp_path / 'voice' / 'city.yaml'}:{where}"), listed
    assert said in listed[0]


def test_a_missing_or_outside_voice_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "news.yaml").write_text(PIPELINE)
    assert spec.check(tmp_path)[0].reason.startswith("voice file not found:")
    (tmp_path / "news.yaml").write_text(PIPELINE.replace("voice/city.yaml", "../city.yaml"))
    (tmp_path.parent / "city.yaml").write_text("")
    assert "outside the pipelines directory" in spec.check(tmp_path)[0].reason


def test_load_reads_a_voice_file_alone(tmp_path: Path) -> None:
    file = tmp_path / "v.yaml"
    file.write_text("remove: [delve]\n")
    parsed, errors = voice.load(file)
    assert errors == [] and parsed is not None
    assert "delve" not in [rule.name for rule in parsed.compiled()]
