"""A TOML file a person named (a suite, an A/B session, thresholds, a host profile):
every way it can be unreadable, as one line that names the file."""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


class TomlFileError(ValueError):
    """The file is missing, not text, or not TOML; the message names it."""


def read(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TomlFileError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise TomlFileError(f"{p}: a folder, not a TOML file") from None
    except UnicodeDecodeError:
        raise TomlFileError(f"{p}: not a text file (not UTF-8), so not TOML") from None
    except OSError as e:
        raise TomlFileError(f"{p}: {e.strerror or e}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TomlFileError(f"{p}: not valid TOML ({e})") from None
