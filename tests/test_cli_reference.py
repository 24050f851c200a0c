"""docs/cli.md holds every tool's `--help` output verbatim; this test keeps it true.

Each section of docs/cli.md that documents a command carries a marker and a fenced block:

    <!-- help: tensormon -->
    ```text
    usage: tensormon [-h] ...
    ```

The commands are read from the code, not from the document: every console script of pyproject.toml's
[project.scripts] and every `tensorcom` subcommand of `tensorcom.cli.main.SUBCOMMANDS`. A subcommand
that runs a console script's own main (`tensorcom mon` is tensormon) has a section marked
`<!-- same help: tensorcom mon = tensormon -->` instead of a block, and its `--help` must equal that
tool's. The commands run in one subprocess (HELP_RUNNER: each through its entry point, called
as its console script calls it, with its sys.argv) with COLUMNS=100 and colour off, so the text does
not depend on the terminal. The comparison ignores how whitespace is laid out and the
spelling differences between argparse versions ("optional arguments:" before Python 3.10's
"options:", and Python 3.13's `-o, --output OUTPUT` for `-o OUTPUT, --output OUTPUT`), so a block
written on one Python passes on another; any changed word fails.

To regenerate every block after changing a tool's options (sections for new commands are appended at
the end of docs/cli.md; give them a place and examples by hand):

    .venv/bin/python tests/test_cli_reference.py --write
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI_MD = ROOT / "docs" / "cli.md"
REGENERATE = ".venv/bin/python tests/test_cli_reference.py --write"
ENV = {"COLUMNS": "100", "LINES": "50", "NO_COLOR": "1", "PYTHON_COLORS": "0", "PYTHONIOENCODING": "utf-8"}
BLOCK = re.compile(r"<!-- help: (?P<name>[^>]+?) -->\n+```text\n(?P<body>.*?)\n?```", re.DOTALL)
ALIAS = re.compile(r"<!-- same help: (?P<name>[^=>]+?) = (?P<script>[^>]+?) -->")


def console_scripts() -> dict[str, str]:
    """{script name: "module:function"} from pyproject.toml's [project.scripts] table."""
    text = (ROOT / "pyproject.toml").read_text()
    table = re.search(r"^\[project\.scripts\]\n(.*?)(?=^\[|\Z)", text, re.MULTILINE | re.DOTALL)
    if table is None:
        raise RuntimeError("pyproject.toml has no [project.scripts] table")
    return dict(re.findall(r'^([\w.-]+)\s*=\s*"([^"]+)"', table.group(1), re.MULTILINE))


def commands() -> tuple[dict[str, list[str]], dict[str, str]]:
    """({title: argv} of the commands with a help block, {alias title: script it runs}).
    Titles are "tensormon", "tensorcom", "tensorcom demo", ..."""
    from tensorcom.cli.main import SUBCOMMANDS

    scripts = console_scripts()
    blocks = {name: [name, "--help"] for name in scripts}
    aliases = {}
    by_entry = {entry: name for name, entry in scripts.items()}
    for sub, (module, function, _) in SUBCOMMANDS.items():
        title = f"tensorcom {sub}"
        if f"{module}:{function}" in by_entry:
            aliases[title] = by_entry[f"{module}:{function}"]
        else:
            blocks[title] = ["tensorcom", sub, "--help"]
    return blocks, aliases


HELP_RUNNER = """
import contextlib, importlib, io, json, sys

texts = {}
for title, (entry, words) in json.loads(sys.argv[1]).items():
    module, function = entry.split(":")
    sys.argv, out = list(words), io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            status = getattr(importlib.import_module(module), function)()
    except SystemExit as exc:
        status = exc.code
    if status not in (0, None):
        sys.exit(f"`{' '.join(words)}` exited {status}")
    texts[title] = out.getvalue()
print(json.dumps(texts))
"""


@cache
def all_help() -> dict[str, str]:
    """{title: help text} of every command with a block and every alias's script: each run through its
    console script's entry point, with that script's sys.argv, in one subprocess (HELP_RUNNER) with the
    environment that fixes the layout."""
    blocks, aliases = commands()
    wanted = {**blocks, **{title: [script, "--help"] for title, script in aliases.items()}}
    wanted.update({f"{title} (as tensorcom)": ["tensorcom", title.split()[1], "--help"] for title in aliases})
    scripts = console_scripts()
    runs = {title: (scripts[words[0]], words) for title, words in wanted.items()}
    result = subprocess.run([sys.executable, "-c", HELP_RUNNER, json.dumps(runs)], check=False, capture_output=True,
                            text=True, timeout=120, env={**os.environ, **ENV}, cwd=ROOT)
    if result.returncode != 0:
        raise RuntimeError(f"the --help runs failed: {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout)


def documented(text: str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """({title: block text} of the help blocks, {alias title: script} of the alias sections) of
    `text` (default: docs/cli.md)."""
    text = CLI_MD.read_text(encoding="utf-8") if text is None else text
    blocks = {m["name"]: m["body"] for m in BLOCK.finditer(text)}
    return blocks, {m["name"]: m["script"] for m in ALIAS.finditer(text)}


def normalize(text: str) -> str:
    """`text` with whitespace collapsed and argparse's version-dependent spellings made one."""
    text = " ".join(text.split())
    text = text.replace("optional arguments:", "options:")
    metavar = r"(\S+(?: \[\S+ \.\.\.\])?)"
    return re.sub(rf"(-{{1,2}}[\w-]+) {metavar}, (?=-{{1,2}}[\w-]+ \2(?:,| |$))", r"\1, ", text)


def stale_message(title: str, expected: str, found: str | None) -> str:
    import difflib

    if found is None:
        return f"docs/cli.md has no `<!-- help: {title} -->` block for `{title}`; run `{REGENERATE}`"
    diff = "\n".join(difflib.unified_diff(found.splitlines(), expected.splitlines(), "docs/cli.md",
                                          f"{title} --help", lineterm="", n=1))
    return f"docs/cli.md: the section of `{title}` is stale (its --help changed); run `{REGENERATE}`\n{diff}"


# ---- the tests ---------------------------------------------------------------------------------


def test_every_command_has_a_section_and_no_section_is_for_a_command_that_is_gone():
    blocks, aliases = commands()
    found, alias_sections = documented()
    missing = sorted(set(blocks) - set(found)) + sorted(set(aliases) - set(alias_sections))
    unknown = sorted(set(found) - set(blocks)) + sorted(set(alias_sections) - set(aliases))
    assert not missing, f"docs/cli.md lacks sections for {missing}; run `{REGENERATE}`"
    assert not unknown, f"docs/cli.md documents commands that no longer exist: {unknown}"
    wrong = {t: s for t, s in alias_sections.items() if t in aliases and aliases[t] != s}
    assert not wrong, f"docs/cli.md: these subcommands run other tools now: {wrong} (expected {aliases})"


def test_every_help_block_is_the_commands_help():
    found, _ = documented()
    stale = [stale_message(title, all_help()[title], found.get(title))
             for title in commands()[0] if normalize(all_help()[title]) != normalize(found.get(title, ""))]
    assert not stale, "\n\n".join(stale)


def test_alias_subcommands_print_their_tools_help():
    texts = all_help()
    for title, script in commands()[1].items():
        assert texts[f"{title} (as tensorcom)"] == texts[script], f"`{title} --help` differs from `{script} --help`"


def test_normalize_makes_argparse_versions_agree():
    old = "optional arguments:\n  -w WORKERS, --workers WORKERS, -N WORKERS, --num-workers WORKERS\n" \
          "  -f FIELDS [FIELDS ...], --fields FIELDS [FIELDS ...]\n  -d {a,b}, --decode {a,b}  decode"
    new = "options:\n  -w, --workers, -N, --num-workers WORKERS\n  -f, --fields FIELDS [FIELDS ...]\n" \
          "  -d, --decode {a,b}\n      decode"
    assert normalize(old) == normalize(new)
    assert normalize("--count N  exit") != normalize("--count N  exits")


# ---- regeneration --------------------------------------------------------------------------------


def write() -> list[str]:
    """Rewrite every help block of docs/cli.md from the commands; append sections for commands that
    have none. Returns the titles whose block changed or was added."""
    text = CLI_MD.read_text(encoding="utf-8")
    texts = all_help()
    changed = []

    def replace(match: re.Match) -> str:
        title = match["name"]
        if title not in texts:
            return match.group(0)
        body = texts[title].rstrip("\n")
        if body != match["body"]:
            changed.append(title)
        return f"<!-- help: {title} -->\n```text\n{body}\n```"

    text = BLOCK.sub(replace, text)
    found, alias_sections = documented(text)
    blocks, aliases = commands()
    for title in blocks:
        if title not in found:
            changed.append(title)
            text = text.rstrip("\n") + (f"\n\n## {title}\n\n<!-- help: {title} -->\n```text\n"
                                        f"{texts[title].rstrip()}\n```\n")
    for title, script in aliases.items():
        if title not in alias_sections:
            changed.append(title)
            text = text.rstrip("\n") + (f"\n\n## {title}\n\n<!-- same help: {title} = {script} -->\n"
                                        f"The same as [`{script}`](#{script}).\n")
    CLI_MD.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    return changed


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    if sys.argv[1:] != ["--write"]:
        print(f"usage: {REGENERATE}   (rewrites the --help blocks of docs/cli.md)", file=sys.stderr)
        sys.exit(2)
    updated = write()
    print(f"docs/cli.md: {len(updated)} section(s) rewritten or added{': ' if updated else ''}{', '.join(updated)}")
