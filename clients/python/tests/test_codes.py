"""The client knows every error code the API's description (docs/openapi.yaml) lists, and no other."""

from __future__ import annotations

import pathlib

from shardlite._errors import CODES

DESCRIPTION = pathlib.Path(__file__).resolve().parents[3] / "docs" / "openapi.yaml"


def described_codes() -> set[str]:
    """The `ErrorCode` enum of the description, read without a YAML parser."""
    text = DESCRIPTION.read_text()
    block = text[text.index("    ErrorCode:") :]
    block = block[: block.index("\n    Error:")]
    return {line.strip()[2:] for line in block.splitlines() if line.strip().startswith("- ")}


def test_every_described_code_has_its_exception():
    assert set(CODES) == described_codes()
