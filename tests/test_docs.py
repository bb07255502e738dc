"""The README and docs/ stay true to the tree: every relative link resolves (file and heading anchor), every
`python experiments/...` command names a script that exists and a config whose flags that config accepts."""

import glob
import importlib
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ([os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
        + sorted(glob.glob(os.path.join(REPO, "studies", "**", "*.md"), recursive=True)))
LINK = re.compile(r"\]\(([^)\s]+)\)")
COMMAND = re.compile(r"python ((?:experiments|studies/\w+)/[\w/]+\.py)"
                     r"((?:[^\n`|]*?--config[ =]((?:configs|studies/\w+)/\w+\.py)(?::([\w,=./-]+))?)?)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lstrip("#").strip().lower()).replace(" ", "-")


def _anchors(path: str) -> set[str]:
    with open(path, encoding="utf-8") as f:
        return {_slug(line) for line in f if line.startswith("#")}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: os.path.relpath(p, REPO))
def test_every_relative_link_resolves(doc):
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    broken = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if not os.path.exists(resolved):
            broken.append(f"{target} (no file {os.path.relpath(resolved, REPO)})")
        elif anchor and resolved.endswith(".md") and anchor not in _anchors(resolved):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{os.path.relpath(doc, REPO)}: broken links {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: os.path.relpath(p, REPO))
def test_every_experiments_command_names_a_script_and_a_config_that_exist(doc):
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    bad = []
    for script, _, config, flags in COMMAND.findall(text):
        if not os.path.exists(os.path.join(REPO, script)):
            bad.append(f"{script} does not exist")
        if not config or f"# {config}" in text:  # none, or one the doc has the reader write (`# configs/x.py`)
            continue
        if not os.path.exists(os.path.join(REPO, config)):
            bad.append(f"{config} does not exist")
            continue
        module = importlib.import_module(config[:-3].replace("/", "."))
        try:
            module.get_config(flags or None)
        except Exception as e:  # an unknown flag or argument
            bad.append(f"{config}:{flags}: {e}")
    assert not bad, f"{os.path.relpath(doc, REPO)}: {bad}"
