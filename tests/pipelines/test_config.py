"""Pipeline YAML loading: real files under tmp_path, exact file, line, field and reason."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from pipelines import dispatch
from pipelines.config import names, spec, yaml_file
from pipelines.config.spec import ConfigError
from pipelines.sources import folder, rss

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "pipelines" / "examples"

GOOD = """\
name: {name}
schedule: 5m
sources:
  - type: rss
    url: http://127.0.0.1:8000/feed.xml
dispatch:
  type: none
"""


def write(directory: Path, filename: str, text: str) -> Path:
    path = directory / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def only_error(directory: Path) -> ConfigError:
    result = spec.load_dir(directory)
    assert result.pipelines == {}
    assert len(result.errors) == 1, spec.format_errors(result.errors)
    return result.errors[0]


def test_examples_load_without_errors() -> None:
    result = spec.load_dir(EXAMPLES)
    assert result.errors == []
    assert set(result.pipelines) >= {"news", "digest"}
    news, digest = result.pipelines["news"], result.pipelines["digest"]
    assert news.schedule.kind == "interval" and news.schedule.interval == timedelta(minutes=15)
    assert isinstance(news.sources[0], rss.Config) and news.draft.drafter == "template"
    assert news.dispatch.type == "file"
    assert digest.schedule.kind == "cron" and isinstance(digest.sources[0], folder.Config)
    assert digest.draft.drafter == "llm" and digest.draft.output_schema is not None
    assert digest.draft.prompt == EXAMPLES / "prompts" / "digest.txt"
    assert digest.draft.prompt_text is not None and "{text}" in digest.draft.prompt_text
    assert digest.dispatch.type == "webhook"


def test_defaults(tmp_path: Path) -> None:
    write(tmp_path, "news.yaml", GOOD.format(name="news"))
    pipeline = spec.load_dir(tmp_path).pipelines["news"]
    assert pipeline.jitter == timedelta(0)
    assert pipeline.misfire_window == timedelta(hours=1)
    assert (pipeline.dedup.mark_at, pipeline.dedup.fail_closed) == ("fetch", False)
    assert pipeline.dedup.duplicate_window_days == 14
    assert (pipeline.draft.drafter, pipeline.draft.prompt, pipeline.draft.max_tokens) == (
        "template",
        None,
        512,
    )
    assert pipeline.approval.operators == [] and pipeline.approval.quorum == 1
    assert pipeline.approval.window == timedelta(hours=24)


def test_yaml_syntax_error(tmp_path: Path) -> None:
    file = write(
        tmp_path,
        "news.yaml",
        """\
        name: news
        sources:
          - type: rss
           url: http://127.0.0.1/x
        """,
    )
    error = only_error(tmp_path)
    assert error == ConfigError(
        file,
        4,
        None,
        "invalid YAML: expected <block end>, but found '<block mapping start>' "
        "(parsing a block collection that starts on line 3)",
    )
    assert str(error).startswith(f"{file}:4: invalid YAML")


def test_an_unclosed_quote_names_the_line_it_opened_on(tmp_path: Path) -> None:
    """PyYAML finds an unclosed quote at the end of the file; the line to fix is earlier."""
    file = write(
        tmp_path,
        "news.yaml",
        """\
        name: news
        schedule: 5m
        sources:
          - type: rss
            url: "http://127.0.0.1/x
            scope: news
        draft:
          prompt: prompt.txt
        """,
    )
    error = only_error(tmp_path)
    assert error == ConfigError(
        file,
        5,
        None,
        "invalid YAML: the quote opened on line 5 is never closed "
        "(found unexpected end of stream at line 9)",
    )


def test_unquoted_cron_gets_a_hint(tmp_path: Path) -> None:
    file = write(tmp_path, "news.yaml", "name: news\nschedule: */15 * * * *\n")
    error = only_error(tmp_path)
    assert (error.file, error.line, error.field) == (file, 2, None)
    assert error.reason.endswith('; quote values that start with *, like schedule: "*/15 * * * *"')


def test_unknown_source_type(tmp_path: Path) -> None:
    text = GOOD.format(name="news").replace("type: rss", "type: rsss")
    file = write(tmp_path, "news.yaml", text)
    error = only_error(tmp_path)
    assert error == ConfigError(
        file, 4, "sources.0.type", "unknown source type 'rsss'; valid: rss, http_json, folder, imap"
    )
    assert str(error) == (
        f"{file}:4: sources.0.type: unknown source type 'rsss'; valid: rss, http_json, folder, imap"
    )


def test_missing_source_type(tmp_path: Path) -> None:
    text = GOOD.format(name="news").replace("  - type: rss\n    url", "  - url")
    file = write(tmp_path, "news.yaml", text)
    assert only_error(tmp_path) == ConfigError(
        file, 4, "sources.0.type", "missing source type; valid: rss, http_json, folder, imap"
    )


def test_error_inside_a_source_is_mapped_without_the_tag(tmp_path: Path) -> None:
    text = GOOD.format(name="news").replace("http://127.0.0.1:8000/feed.xml", "ftp://x/feed")
    file = write(tmp_path, "news.yaml", text)
    assert only_error(tmp_path) == ConfigError(
        file, 5, "sources.0.url", "must be an http:// or https:// URL"
    )


@pytest.mark.parametrize("value", ["often", "5x", "'61 * * * *'"])
def test_bad_schedule(tmp_path: Path, value: str) -> None:
    file = write(tmp_path, "news.yaml", GOOD.format(name="news").replace("5m", value))
    error = only_error(tmp_path)
    assert (error.file, error.line, error.field) == (file, 2, "schedule")
    assert error.reason.endswith(
        "expected an interval like 5m or 1h, a 5-field cron expression, or manual"
    )
    assert value.strip("'") in error.reason


def test_bad_jitter(tmp_path: Path) -> None:
    file = write(tmp_path, "news.yaml", GOOD.format(name="news") + "jitter: 30\n")
    assert only_error(tmp_path) == ConfigError(
        file,
        8,
        "jitter",
        "invalid interval 30: expected a number with a unit s, m, h or d,"
        " like 30s, 5m, 1h, 2d or 1h30m",
    )


def test_missing_prompt_file_names_the_resolved_path(tmp_path: Path) -> None:
    text = GOOD.format(name="news") + "draft:\n  drafter: llm\n  prompt: prompts/missing.txt\n"
    file = write(tmp_path, "news.yaml", text)
    missing = (tmp_path / "prompts" / "missing.txt").resolve()
    assert only_error(tmp_path) == ConfigError(
        file, 10, "draft.prompt", f"prompt file not found: {missing}"
    )


def test_llm_requires_a_prompt(tmp_path: Path) -> None:
    file = write(tmp_path, "news.yaml", GOOD.format(name="news") + "draft:\n  drafter: llm\n")
    assert only_error(tmp_path) == ConfigError(
        file, 8, "draft.prompt", "required when drafter is llm: the path of a prompt file"
    )


def test_prompt_with_unknown_placeholder(tmp_path: Path) -> None:
    prompt = write(tmp_path, "p/ask.txt", "Summarise {body}")
    text = GOOD.format(name="news") + "draft:\n  drafter: llm\n  prompt: p/ask.txt\n"
    file = write(tmp_path, "news.yaml", text)
    assert only_error(tmp_path) == ConfigError(
        file,
        10,
        "draft.prompt",
        f"prompt file {prompt.resolve()}: unknown placeholder {{body}} in prompt template;"
        " valid: {link}, {pipeline}, {summary}, {text}, {title}",
    )


def test_invalid_inline_output_schema(tmp_path: Path) -> None:
    text = GOOD.format(name="news") + "draft:\n  output_schema:\n    type: objekt\n"
    file = write(tmp_path, "news.yaml", text)
    error = only_error(tmp_path)
    assert (error.file, error.line, error.field) == (file, 9, "draft.output_schema")
    assert error.reason.startswith("invalid JSON Schema: 'objekt' is not valid under any of")
    assert error.reason.endswith("(at type)")


def test_output_schema_from_a_file(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"summary": {"type": "string"}}}
    write(tmp_path, "schemas/out.json", json.dumps(schema))
    text = GOOD.format(name="news") + "draft:\n  output_schema: schemas/out.json\n"
    write(tmp_path, "news.yaml", text)
    result = spec.load_dir(tmp_path)
    assert result.errors == []
    assert result.pipelines["news"].draft.output_schema == schema


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "schema file not found: {path}"),
        ("{not json", "schema file {path} is not valid JSON: Expecting property name"),
        ('{"type": 5}', "invalid JSON Schema: 5 is not valid under any of the given schemas"),
    ],
)
def test_bad_output_schema_file(tmp_path: Path, content: str | None, reason: str) -> None:
    path = tmp_path / "out.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    text = GOOD.format(name="news") + "draft:\n  output_schema: out.json\n"
    file = write(tmp_path, "news.yaml", text)
    error = only_error(tmp_path)
    assert (error.file, error.line, error.field) == (file, 9, "draft.output_schema")
    assert error.reason.startswith(reason.format(path=path.resolve()))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prompt", "../../../../../../../..{outside}/ask.txt"),  # up to / and down again
        ("prompt", "{outside}/ask.txt"),
        ("prompt", "linked.txt"),  # a symlink in the directory, to a file outside it
        ("output_schema", "../outside/out.json"),
    ],
)
def test_a_file_sent_to_the_provider_may_not_leave_the_pipelines_directory(
    tmp_path: Path, field: str, value: str
) -> None:
    outside = tmp_path / "outside"
    write(outside, "ask.txt", "Summarise {title}")
    write(outside, "out.json", '{"type": "object"}')
    here = tmp_path / "pipelines"
    write(here, "ask.txt", "Summarise {title}")
    (here / "linked.txt").symlink_to(outside / "ask.txt")
    value = value.format(outside=outside)
    draft = f"prompt: {value}" if field == "prompt" else f"prompt: ask.txt\n  {field}: {value}"
    text = GOOD.format(name="news") + f"draft:\n  drafter: llm\n  {draft}\n"
    file = write(here, "news.yaml", text)
    noun = "prompt file" if field == "prompt" else "schema file"
    assert only_error(here) == ConfigError(
        file,
        10 if field == "prompt" else 11,
        f"draft.{field}",
        f"{noun} {value!r} resolves to {(here / value).resolve()}, outside the pipelines"
        f" directory {here.resolve()}: it is sent to the LLM provider, so it must be in that"
        " directory or below",
    )


def test_a_prompt_symlinked_within_the_pipelines_directory_is_followed(tmp_path: Path) -> None:
    prompt = write(tmp_path, "prompts/ask.txt", "Summarise {title}")
    (tmp_path / "ask.txt").symlink_to(prompt)
    write(
        tmp_path,
        "news.yaml",
        GOOD.format(name="news") + "draft:\n  drafter: llm\n  prompt: ask.txt\n",
    )
    assert spec.load_dir(tmp_path).pipelines["news"].draft.prompt == prompt.resolve()


def test_an_output_schema_pattern_re2_cannot_run_is_refused_naming_it(tmp_path: Path) -> None:
    text = GOOD.format(name="news") + (
        "draft:\n  output_schema:\n    type: object\n    properties:\n"
        "      tag: {type: string, pattern: '(?<=#)[a-z]+'}\n"
    )
    file = write(tmp_path, "news.yaml", text)
    assert only_error(tmp_path) == ConfigError(
        file,
        9,
        "draft.output_schema",
        "pattern '(?<=#)[a-z]+' cannot run on RE2 (invalid perl operator: (?<=); RE2 has no"
        " lookahead, lookbehind or backreferences: rewrite it without them (at properties/tag)",
    )


def test_duplicate_name_keeps_the_first_and_names_both_files(tmp_path: Path) -> None:
    first = write(tmp_path, "a.yaml", GOOD.format(name="news"))
    second = write(tmp_path, "b.yml", "# the same name again\n" + GOOD.format(name="news"))
    result = spec.load_dir(tmp_path)
    assert list(result.pipelines) == ["news"]
    assert result.files["news"] == first
    assert result.errors == [
        ConfigError(
            second, 2, "name", f"duplicate pipeline name 'news': already defined in {first}"
        )
    ]


@pytest.mark.parametrize(
    ("extra", "line", "field", "unknown"),
    [
        ("schedul: 1h\n", 8, "schedul", "'schedul'; valid: name, schedule, jitter,"),
        ("draft:\n  max_token: 5\n", 9, "draft.max_token", "'max_token'; valid: drafter, prompt,"),
        ("approval:\n  quorom: 2\n", 9, "approval.quorom", "'quorom'; valid: operators, quorum,"),
    ],
)
def test_unknown_field_is_named(
    tmp_path: Path, extra: str, line: int, field: str, unknown: str
) -> None:
    file = write(tmp_path, "news.yaml", GOOD.format(name="news") + extra)
    error = only_error(tmp_path)
    assert (error.file, error.line, error.field) == (file, line, field)
    assert error.reason.startswith(f"unknown field {unknown}")


def test_unknown_field_inside_a_source_and_a_dispatch(tmp_path: Path) -> None:
    text = GOOD.format(name="news").replace("    url:", "    urll: x\n    url:")
    text = text.replace("type: none", "type: file\n  path: out\n  mode: append")
    file = write(tmp_path, "news.yaml", text)
    result = spec.load_dir(tmp_path)
    assert [(e.file, e.line, e.field) for e in result.errors] == [
        (file, 5, "sources.0.urll"),
        (file, 10, "dispatch.mode"),
    ]
    # The rss model belongs to the sources package: check the shape, not its full field list.
    assert result.errors[0].reason.startswith("unknown field 'urll'; valid: type, url")
    assert result.errors[1].reason == "unknown field 'mode'; valid: type, path"


def test_unknown_dispatch_type(tmp_path: Path) -> None:
    file = write(tmp_path, "news.yaml", GOOD.format(name="news").replace("none", "slack"))
    assert only_error(tmp_path) == ConfigError(
        file,
        7,
        "dispatch.type",
        "unknown dispatch type 'slack'; valid: webhook, file, smtp, telegram_channel, none",
    )


def test_missing_required_fields(tmp_path: Path) -> None:
    file = write(tmp_path, "news.yaml", "name: news\nschedule: manual\nsources: []\n")
    result = spec.load_dir(tmp_path)
    assert result.errors == [
        ConfigError(file, 1, "dispatch", "required field is missing"),
        ConfigError(file, 3, "sources", "at least one source is required"),
    ]


@pytest.mark.parametrize(
    ("extra", "line", "field", "reason"),
    [
        (
            "approval:\n  operators: [1, 2]\n  quorum: 3\n",
            10,
            "approval.quorum",
            "quorum 3 can never be reached: 2 approval.operators may approve;"
            " use a quorum from 1 to 2",
        ),
        ("approval:\n  window: 0s\n", 9, "approval.window", "must be longer than 0s"),
        ("name: other\n", 8, "name", "duplicate key 'name'"),
    ],
)
def test_other_rules(tmp_path: Path, extra: str, line: int, field: str, reason: str) -> None:
    file = write(tmp_path, "news.yaml", GOOD.format(name="news") + extra)
    assert only_error(tmp_path) == ConfigError(file, line, field, reason)


@pytest.mark.parametrize(
    ("name", "ok"), [("news-2_b", True), ("News", False), ("-x", False), ("a b", False)]
)
def test_name_must_be_a_slug(tmp_path: Path, name: str, ok: bool) -> None:
    write(tmp_path, "p.yaml", GOOD.format(name=f"'{name}'"))
    result = spec.load_dir(tmp_path)
    assert (name in result.pipelines) is ok
    if not ok:
        assert result.errors[0].field == "name"
        assert "lowercase letters, digits, - and _" in result.errors[0].reason


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("", None, "empty file: expected the fields of one pipeline"),
        ("- a\n- b\n", 1, "expected a mapping of pipeline fields"),
    ],
)
def test_not_a_pipeline_mapping(tmp_path: Path, text: str, line: int | None, reason: str) -> None:
    file = write(tmp_path, "x.yaml", text)
    error = only_error(tmp_path)
    assert (error.file, error.line) == (file, line)
    assert error.reason.startswith(reason)


def test_bad_files_do_not_stop_good_ones(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", GOOD.format(name="alpha"))
    bad = write(tmp_path, "b.yaml", "name: beta\nschedule: [\n")
    write(tmp_path, "c.yml", GOOD.format(name="gamma"))
    worse = write(tmp_path, "d.yaml", GOOD.format(name="delta").replace("rss", "rsss"))
    write(tmp_path, "e.yaml.bak", "not: [valid")
    write(tmp_path, "README.md", "# not a pipeline")
    result = spec.load_dir(tmp_path)
    assert list(result.pipelines) == ["alpha", "gamma"]
    assert [error.file for error in result.errors] == [bad, worse]
    assert spec.check(tmp_path) == result.errors
    lines = spec.format_errors(result.errors).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{bad}:3: invalid YAML")
    assert lines[1] == (
        f"{worse}:4: sources.0.type: unknown source type 'rsss';"
        " valid: rss, http_json, folder, imap"
    )


def test_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    assert spec.check(missing) == [
        ConfigError(missing, None, None, "not a directory of pipeline files")
    ]
    assert spec.format_errors(spec.check(missing)) == (
        f"{missing}: not a directory of pipeline files"
    )


def test_dispatch_block_uses_the_dispatch_targets(tmp_path: Path) -> None:
    text = GOOD.format(name="mail").replace(
        "type: none",
        "type: smtp\n  host: 127.0.0.1\n  port: 2525\n  from_addr: bot@example.org\n"
        "  username: bot\n  password_env: SMTP_PASSWORD",
    )
    write(tmp_path, "mail.yaml", text)
    write(
        tmp_path,
        "chan.yaml",
        GOOD.format(name="chan").replace("type: none", "type: telegram_channel\n  chat_id: -100"),
    )
    result = spec.load_dir(tmp_path)
    assert result.errors == []
    mail = result.pipelines["mail"].dispatch
    assert isinstance(mail, dispatch.SmtpTarget)
    assert (mail.port, mail.starttls, mail.password_env) == (2525, True, "SMTP_PASSWORD")
    chan = result.pipelines["chan"].dispatch
    assert isinstance(chan, dispatch.TelegramChannelTarget) and chan.chat_id == -100


def alias_bomb() -> str:
    """9 levels of 9 aliases: 9**9 (387 million) values once expanded."""
    lines = ['a0: &a0 ["lol"]']
    for level in range(1, 10):
        refs = ", ".join(f"*a{level - 1}" for _ in range(9))
        lines.append(f"a{level}: &a{level} [{refs}]")
    return GOOD.format(name="bomb") + "\n".join(lines) + "\n"


def test_an_alias_bomb_is_an_error_on_its_file_and_the_others_load(tmp_path: Path) -> None:
    bomb = write(tmp_path, "bomb.yaml", alias_bomb())
    write(tmp_path, "news.yaml", GOOD.format(name="news"))
    result = spec.load_dir(tmp_path)
    assert list(result.pipelines) == ["news"]
    assert len(result.errors) == 1
    error = result.errors[0]
    assert (error.file, error.field) == (bomb, None)
    assert error.line is not None and 8 <= error.line <= 17  # one of the a0..a9 lines
    assert f"aliases (&anchor / *alias) expand to more than {yaml_file.MAX_ALIAS_VALUES}" in (
        error.reason
    )
    assert str(error).startswith(f"{bomb}:{error.line}: ")


@pytest.mark.parametrize(
    "nested",
    [
        "[" * 20_000 + "]" * 20_000,
        "{a: " * 60_000,  # near the file cap: the scanner must stop early, not look ahead
        "\n" + "- " * 100_000 + "x",
    ],
)
def test_deep_nesting_is_an_error_on_its_file_and_the_others_load(
    tmp_path: Path, nested: str
) -> None:
    deep = write(tmp_path, "deep.yaml", "name: deep\nextra: " + nested + "\n")
    write(tmp_path, "news.yaml", GOOD.format(name="news"))
    result = spec.load_dir(tmp_path)
    assert list(result.pipelines) == ["news"]
    assert [(e.file, e.reason) for e in result.errors] == [
        (deep, f"nested more than {yaml_file.MAX_DEPTH} levels deep")
    ]
    assert result.errors[0].line in (2, 3)


@pytest.mark.parametrize("byte", ["\x07", "\x00"])
def test_a_control_character_fails_its_file_alone(tmp_path: Path, byte: str) -> None:
    stray = write(tmp_path, "stray.yaml", GOOD.format(name="stray").replace("5m", f"5m{byte}"))
    write(tmp_path, "news.yaml", GOOD.format(name="news"))
    result = spec.load_dir(tmp_path)
    assert list(result.pipelines) == ["news"]
    assert [str(error) for error in result.errors] == [
        f"{stray}:2: invalid YAML: unprintable character U+{ord(byte):04X} at column 13;"
        " YAML allows tabs, line breaks and printable characters: remove it"
    ]
    assert names.name_in(stray) is None


def test_a_file_too_large_to_be_a_pipeline_is_refused_unread(tmp_path: Path) -> None:
    big = write(tmp_path, "big.yaml", GOOD.format(name="big") + "#" * yaml_file.MAX_FILE_BYTES)
    error = only_error(tmp_path)
    assert (error.file, error.line) == (big, None)
    assert error.reason.startswith(
        f"file larger than {yaml_file.MAX_FILE_BYTES} bytes, the most a pipeline file may hold"
    )


def test_anchors_within_bounds_still_work(tmp_path: Path) -> None:
    text = (
        GOOD.format(name="anchors").replace("  - type: rss\n", "  - &feed\n    type: rss\n")
        + "approval: {operators: &ops [1, 2], quorum: 2}\n"
    )
    write(tmp_path, "anchors.yaml", text)
    result = spec.load_dir(tmp_path)
    assert result.errors == [] and result.pipelines["anchors"].approval.operators == [1, 2]


@pytest.mark.parametrize(
    ("approval", "operators", "reason"),
    [
        (
            "quorum: 99999999999999999999999",
            {1, 2},
            "quorum 99999999999999999999999 can never be reached: 2 bot operators"
            " (GATEHOUSE_TELEGRAM__OPERATORS) may approve; use a quorum from 1 to 2",
        ),
        (
            "operators: [1, 2, 3]\n  quorum: 3",
            {1, 2},
            "quorum 3 can never be reached: 2 approval.operators that are bot operators"
            " may approve; use a quorum from 1 to 2",
        ),
        (
            "operators: [7]",
            {1, 2},
            "no operator may approve: none of approval.operators is a bot operator"
            " (GATEHOUSE_TELEGRAM__OPERATORS)",
        ),
    ],
)
def test_quorum_is_at_most_the_operators_who_may_approve(
    tmp_path: Path, approval: str, operators: set[int], reason: str
) -> None:
    file = write(tmp_path, "q.yaml", GOOD.format(name="q") + f"approval:\n  {approval}\n")
    context = spec.LoadContext(operators=frozenset(operators))
    result = spec.load_dir(tmp_path, context)
    assert result.pipelines == {}
    assert [(e.file, e.field, e.reason) for e in result.errors] == [
        (file, "approval.quorum", reason)
    ]
    write(tmp_path, "q.yaml", GOOD.format(name="q") + "approval:\n  quorum: 2\n")
    assert spec.load_dir(tmp_path, context).errors == []


def test_declared_names_match_what_loading_finds_for_good_files(tmp_path: Path) -> None:
    write(tmp_path, "b.yaml", GOOD.format(name="beta"))
    write(tmp_path, "a.yml", GOOD.format(name="alpha"))
    assert names.declared(tmp_path) == sorted(spec.load_dir(tmp_path).pipelines)
    assert names.declared(EXAMPLES) == sorted(spec.load_dir(EXAMPLES).pipelines)


def test_declared_names_skip_what_declares_no_valid_name(tmp_path: Path) -> None:
    """Read without the models: a file that fails later checks is listed, one without a
    usable name is not, and a hostile file is refused as loading refuses it."""
    write(tmp_path, "ok.yaml", GOOD.format(name="news"))
    write(tmp_path, "later.yaml", "name: later\nschedule: never\n")  # fails the models
    write(tmp_path, "again.yaml", GOOD.format(name="news"))  # a second file, one name
    write(tmp_path, "bad-name.yaml", GOOD.format(name="Not A Slug"))
    write(tmp_path, "no-name.yaml", "schedule: 5m\n")
    write(tmp_path, "list.yaml", "- name: x\n")
    write(tmp_path, "broken.yaml", "name: [unclosed\n")
    write(tmp_path, "deep.yaml", "name: deep\nx: " + "[" * 100 + "]" * 100 + "\n")
    write(tmp_path, "notes.txt", GOOD.format(name="text"))
    assert names.declared(tmp_path) == ["later", "news"]
    assert names.declared(tmp_path / "missing") == []


def test_declared_names_come_from_the_cache_until_a_file_changes(tmp_path: Path) -> None:
    pipelines, cache = tmp_path / "pipelines", tmp_path / "data" / names.CACHE_NAME
    pipelines.mkdir()
    cache.parent.mkdir()
    file = write(pipelines, "a.yaml", GOOD.format(name="alpha"))
    write(pipelines, "b.yaml", "name: [unclosed\n")
    assert names.declared(pipelines, cache) == ["alpha"]
    assert cache.stat().st_mode & 0o777 == 0o600
    # An unchanged file is not read again: the cache's answer stands.
    entries = json.loads(cache.read_text())
    entries[str(file)][1] = "from-cache"
    cache.write_text(json.dumps(entries))
    assert names.declared(pipelines, cache) == ["from-cache"]
    # A changed file is read again, and so is one that is back after being removed.
    write(pipelines, "a.yaml", GOOD.format(name="renamed"))
    assert names.declared(pipelines, cache) == ["renamed"]
    file.unlink()
    assert names.declared(pipelines, cache) == []
    assert list(json.loads(cache.read_text())) == [str(pipelines / "b.yaml")]
    write(pipelines, "a.yaml", GOOD.format(name="alpha"))
    assert names.declared(pipelines, cache) == ["alpha"]


@pytest.mark.parametrize(
    "cached",
    [
        "not json",
        "[1, 2]",
        '{"KEY": [[1, 2, 3], "short-stamp"]}',
        '{"KEY": [[1, 2, 3, 4], "Not A Name"]}',
        '{"KEY": [[1, 2, 3, 4], 7]}',
        "x" * (names.CACHE_MAX_BYTES + 1),
    ],
)
def test_a_cache_that_cannot_be_trusted_is_read_past_and_written_anew(
    tmp_path: Path, cached: str
) -> None:
    file = write(tmp_path, "a.yaml", GOOD.format(name="alpha"))
    info = file.stat()
    stamp = [info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
    cache = tmp_path / "names.json"
    # A forged entry with the file's real stamp where the shape allows one.
    cache.write_text(cached.replace("KEY", str(file)).replace("[1, 2, 3, 4]", json.dumps(stamp)))
    assert names.declared(tmp_path, cache) == ["alpha"]
    assert json.loads(cache.read_text()) == {str(file): [stamp, "alpha"]}


def test_a_cache_that_cannot_be_written_costs_only_a_parse(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", GOOD.format(name="alpha"))
    cache = tmp_path / "no-such-directory" / names.CACHE_NAME
    assert names.declared(tmp_path, cache) == ["alpha"]
    assert names.declared(tmp_path, cache) == ["alpha"]
    assert not cache.parent.exists()


def test_a_warm_cache_spares_a_cli_start_the_yaml_parser(tmp_path: Path) -> None:
    """What the cache is for: `gatehouse status` starts without importing PyYAML."""
    write(tmp_path, "a.yaml", GOOD.format(name="alpha"))
    cache = tmp_path / "names.json"
    probe = (
        "import sys; from pathlib import Path; from pipelines.config import names; "
        f"found = names.declared(Path({str(tmp_path)!r}), Path({str(cache)!r})); "
        "print(found, 'yaml' in sys.modules)"
    )

    def start() -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
        )
        return done.stdout.strip()

    assert start() == "['alpha'] True"  # the first start parses the file
    assert start() == "['alpha'] False"
