"""Paths a pipeline file names are relative to that file, wherever gatehouse was started.

    path: config_paths.BesideFile     # a field of a model inside a pipeline file

`config.load_file` passes the file's directory under BASE_DIR in the validation context;
a relative path becomes an absolute one beside the file, so the same file reads and
writes the same folders whatever the working directory. Validated without that context
(a model built in code), a path is kept as given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, ValidationInfo

#: The validation context's key for the directory of the pipeline file being loaded.
BASE_DIR = "base_dir"


def base_dir(info: ValidationInfo) -> Path:
    """The directory of the pipeline file being validated; Path() without one."""
    context = info.context if isinstance(info.context, dict) else {}
    base = context.get(BASE_DIR)
    return base if isinstance(base, Path) else Path()


def beside_file(value: Path, info: ValidationInfo) -> Path:
    """`value` against the pipeline file's directory (an absolute `value` stays as it is)."""
    return base_dir(info) / value


#: A folder or file a pipeline file names, relative to that file.
BesideFile = Annotated[Path, AfterValidator(beside_file)]
