"""A pipeline's triage: a cheap model asked one question about each entry before it is
drafted (pure: the config model, the prompt and the reading of the answer; the call
itself is a paid call of its own: pipelines/drafting/question.py; what the verdict
does to the entry, the triage step in pipelines/drafting/steps.py).

    triage:
      question: "Is this about public transport in the city?"
      model: gpt-4o-mini       # optional; the provider's model by default
      threshold: 0.6           # below it, the entry ends skipped
      max_tokens: 60
      on_failure: pass         # pass (drafted, the card says not triaged) or hold (waits)

    verdict = triage.read(reply_text)      # Verdict(score, reason), or InvalidVerdict
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: The longest reason kept: one line an operator reads in a list.
MAX_REASON_CHARS = 200

#: What the model must answer; `calls.system_prompt` shows it to the model, and
#: `validation.validate` checks the reply against it (no `pattern`: see check_patterns).
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["score", "reason"],
    "additionalProperties": False,
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string", "minLength": 1, "maxLength": 1000},
    },
}


class TriageConfig(BaseModel):
    """The `triage:` block of a pipeline file."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=1000)
    #: A model priced in GATEHOUSE_PRICES; None: the provider's configured model.
    model: str | None = None
    threshold: float = Field(default=0.5, ge=0, le=1)
    max_tokens: int = Field(default=60, ge=16, le=1000)
    #: When triage cannot run: pass (the person decides) or hold (the entry waits).
    on_failure: Literal["pass", "hold"] = "pass"

    @field_validator("question")
    @classmethod
    def _one_question(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the triage question is empty: write the question the model answers")
        return value.strip()

    def template(self) -> str:
        """The prompt template: the question, then the entry (fenced as untrusted)."""
        # Braces in the question are the operator's text, not placeholders.
        question = self.question.replace("{", "(").replace("}", ")")
        return (
            f"Question: {question}\n"
            "Score how well the entry below answers yes, from 0 (not at all) to 1 "
            "(certainly), and give the reason in one short line.\n\n{title}\n{text}\n"
        )


@dataclass(frozen=True)
class Verdict:
    score: float
    reason: str

    def passes(self, threshold: float) -> bool:
        return self.score >= threshold

    def said(self) -> str:
        """The verdict as an event's reason and a list's line: `triage 0.20: why`."""
        return f"triage {self.score:.2f}: {self.reason}"


class InvalidVerdict(ValueError):
    """The model's answer is not a score 0..1 and a reason; the message says which."""


def read(text: str) -> Verdict:
    """The verdict in a reply already validated against SCHEMA; the reason on one line."""
    try:
        document = json.loads(text)
        score = float(document["score"])
        reason = " ".join(str(document["reason"]).split())
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidVerdict(f"the triage answer is not a score and a reason: {exc}") from None
    if not 0 <= score <= 1 or not reason:
        raise InvalidVerdict(f"the triage score {score} is not within 0..1, or no reason given")
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1].rstrip() + "…"
    return Verdict(score, reason)
