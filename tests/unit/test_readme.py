"""README.md is for the collection's users and works where the collection is installed (issue 47 item 4): under 400
lines; every link to a repository file names one the built tarball ships (galaxy.yml's build_ignore: an air-gapped
site has only the tarball), in absolute form (https://github.com/k8sgpu/ansible-collection-nvidia/...) or relative;
every anchor a heading of the README; the changelog and the porting guide linked; every fenced block with a
language. tests/lab/test_site_readme_commands.py runs its shell blocks, and checks the same links against a tarball
it builds."""
from __future__ import annotations

import re

import pytest
import yaml

from k8sgpu_testlib import readme

README = readme.ROOT / "README.md"
MAX_LINES = 400


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than - and _ dropped, spaces to -."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_readme_is_under_400_lines():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < MAX_LINES, f"README.md has {lines} lines; development and benchmark matter goes to docs/"


def test_tarball_file_list_follows_build_ignore():
    files = readme.tarball_files()
    # What galaxy.yml keeps out and what it ships: the check below is only as good as this list.
    assert {"README.md", "LICENSE", "CHANGELOG.rst", "roles/driver/README.md", "meta/runtime.yml"} <= files
    assert not {"Makefile", "tests/unit/test_readme.py", "site.yml", "inventories/lab/hosts.yml"} & files
    assert readme.ignored("docs/h100/driver.log", ["docs"]) and not readme.ignored("docsx/a", ["docs"])
    assert readme.ignored("roles/x/__pycache__/a.pyc", ["**/__pycache__"])


def test_every_repository_link_names_a_file_the_tarball_ships():
    files = readme.tarball_files()
    targets = readme.links(README.read_text(encoding="utf-8"))
    assert len(targets) > 20, targets  # the links are found
    bad = []
    for target in targets:
        path = readme.repository_path(target)
        if path is None:
            if target.startswith(("http://", "https://")) and target.startswith(readme.REPOSITORY):
                # The repository itself (issues, development), not one of its files.
                assert target.rstrip("/") == readme.REPOSITORY, f"{target}: a repository link that is not a file path"
            continue
        if path not in files:
            bad.append(f"{target} ({path} is not in the tarball: galaxy.yml build_ignore)")
    assert not bad, "README.md links files the built tarball lacks:\n" + "\n".join(bad)


def test_anchors_are_headings_of_the_readme():
    text = README.read_text(encoding="utf-8")
    anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    wanted = [t[1:] for t in readme.links(text) if t.startswith("#")]
    wanted += [t.split("#", 1)[1] for t in readme.links(text) if t.startswith(f"{readme.REPOSITORY}/blob/main/README.md#")]
    assert wanted, "no anchor found: the check reads nothing"
    assert not [a for a in wanted if a not in anchors], (wanted, anchors)


@pytest.mark.parametrize("path", ["CHANGELOG.rst", "docs/porting_guide_2.rst"])
def test_changelog_and_porting_guide_are_linked(path):
    assert path in {readme.repository_path(t) for t in readme.links(README.read_text(encoding="utf-8"))}


def test_every_block_has_a_language_and_markers_have_a_reason():
    found = readme.blocks(README)
    assert sum(b.shell for b in found) >= 8, [b.where() for b in found]
    assert not [b.where() for b in found if not b.lang], "a fenced block without a language (sh, bash, yaml, ...)"
    # The marker only means something on a shell block.
    assert not [b.where() for b in found if b.not_run and not b.shell]


def test_alertmanager_receiver_matches_the_rulebook():
    """The README's Alertmanager receiver (YAML, not run) routes exactly the alerts the rulebook acts on, to the
    source's default address."""
    receiver = [yaml.safe_load(b.body) for b in readme.blocks(README) if b.lang == "yaml" and "k8sgpu-gpu-health" in b.body]
    assert len(receiver) == 1, receiver
    route, = receiver[0]["route"]["routes"]
    names = set(re.fullmatch(r'alertname=~"([^"]+)"', route["matchers"][0]).group(1).split("|"))
    rulebook = yaml.safe_load((readme.ROOT / "extensions/eda/rulebooks/gpu_health.yml").read_text(encoding="utf-8"))
    acted_on = set()
    for rule in rulebook[0]["rules"]:
        found = re.search(r"alertname in \[([^\]]+)\]", rule["condition"])
        if found:
            acted_on |= set(re.findall(r'"([^"]+)"', found.group(1)))
    assert names == acted_on and len(names) == 4, (names, acted_on)
    hook, = receiver[0]["receivers"][0]["webhook_configs"]
    assert hook["url"] == "http://127.0.0.1:5000/alerts" and hook["send_resolved"] is True, hook
