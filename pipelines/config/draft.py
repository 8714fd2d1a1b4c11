"""A pipeline's `draft:` block: who writes the draft, and what an LLM drafter is given.

`draft.prompt` and a `draft.output_schema` file are relative to the pipeline file and may
not leave its directory (symlinks are followed): those files are sent to the LLM provider.
The prompt is read and checked once, when the file is loaded (`DraftConfig.prompt_text`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipelines.drafting import prompt as drafting
from pipelines.ground import paths
from pipelines.text import validation


class DraftConfig(BaseModel):
    """Who writes the draft: the deterministic template drafter or an LLM."""

    model_config = ConfigDict(extra="forbid")

    drafter: Literal["template", "llm"] = "template"
    #: Prompt template file, relative to the YAML file; required for llm.
    prompt: Path | None = Field(default=None, validate_default=True)
    max_tokens: int = Field(default=512, ge=1)
    #: A JSON Schema the model's output must match: inline, or a .json file path.
    output_schema: dict[str, Any] | None = None
    model: str | None = None

    _prompt_text: str | None = PrivateAttr(default=None)

    @field_validator("prompt", mode="after")
    @classmethod
    def _check_prompt(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            if info.data.get("drafter") == "llm":
                raise ValueError("required when drafter is llm: the path of a prompt file")
            return None
        resolved = _inside(info, value, "prompt file")
        if not resolved.is_file():
            raise ValueError(f"prompt file not found: {resolved}")
        try:
            drafting.check_template(resolved.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read prompt file {resolved}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"prompt file {resolved}: {exc}") from None
        return resolved

    @field_validator("output_schema", mode="before")
    @classmethod
    def _check_schema(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return None
        if isinstance(value, str):
            value = _read_json(_inside(info, Path(value), "schema file"))
        if not isinstance(value, dict):
            raise ValueError("must be a JSON Schema mapping or the path of a .json file")
        import jsonschema  # only pipelines with an output schema pay for it

        validator = jsonschema.validators.validator_for(value)
        try:
            validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            where = ".".join(str(part) for part in exc.path)
            raise ValueError(
                f"invalid JSON Schema: {exc.message}" + (f" (at {where})" if where else "")
            ) from None
        validation.check_patterns(value)
        return value

    @model_validator(mode="after")
    def _load_prompt(self) -> DraftConfig:
        if self.prompt is not None:
            self._prompt_text = self.prompt.read_text(encoding="utf-8")
        return self

    @property
    def prompt_text(self) -> str | None:
        """The prompt template as read (and checked) when the config was loaded."""
        return self._prompt_text


def _inside(info: ValidationInfo, value: Path, noun: str) -> Path:
    """`value` resolved (symlinks too) against the pipeline file's directory; refused when
    it leaves that directory, since what the file holds is sent to the LLM provider."""
    base = paths.base_dir(info).resolve()
    resolved = (base / value).resolve()
    if not resolved.is_relative_to(base):
        raise ValueError(
            f"{noun} {str(value)!r} resolves to {resolved}, outside the pipelines directory"
            f" {base}: it is sent to the LLM provider, so it must be in that directory or below"
        )
    return resolved


def _read_json(path: Path) -> object:
    resolved = path.resolve()
    try:
        return json.loads(resolved.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"schema file not found: {resolved}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read schema file {resolved}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"schema file {resolved} is not valid JSON: {exc.msg} (line {exc.lineno})"
        ) from None
