"""The Claude Code CLI (pinned in tests/claude/package-lock.json, installed by
tests/setup-claude.sh, driven by claude_cli.py) is installed as the native binary of the pinned
version. A missing install fails here with the setup hint, never a skip."""

from __future__ import annotations

from claude_cli import claude_version, pinned_version


def test_cli_is_the_pinned_native_build():
    assert claude_version() == pinned_version()
