"""Generate the "## Variables" table of each role's README.md from its meta/argument_specs.yml (issue 48 item 2).

Each variable is described once, in the role's argument spec (what `ansible-doc -t role` shows); its default is the
value of defaults/main.yml. The table sits between the two markers below; everything else of the README is
written by hand.

    python tests/support/role_readmes.py           # rewrite the tables (make docs)
    python tests/support/role_readmes.py --check   # exit 1 naming each README out of step

tests/unit/test_role_readmes.py fails when a README is out of step.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
BEGIN = "<!-- BEGIN variables: generated from meta/argument_specs.yml by tests/support/role_readmes.py (make docs) -->"
END = "<!-- END variables -->"
_INLINE_MAX = 60  # a default longer than this as inline YAML is shown as "mapping/list, see defaults/main.yml"
# Ansible's documentation markup (https://docs.ansible.com/ansible/latest/dev_guide/ansible_markup.html).
_OPTION_OF = re.compile(r"\b(?:O|RV)\(([a-z0-9_.]+)#[a-z]+:([^()]*)\)")
_CODE = re.compile(r"\b(?:C|V|O|E|RV|M)\(((?:[^()]|\([^()]*\))*)\)")
_PLUGIN = re.compile(r"\bP\(([^#()]+)#[a-z]+\)")
_ITALIC = re.compile(r"\bI\(([^()]*)\)")
_BOLD = re.compile(r"\bB\(([^()]*)\)")
_LINK = re.compile(r"\bL\(([^,()]*),\s*([^()]*)\)")
_URL = re.compile(r"\bU\(([^()]*)\)")


def roles() -> list[str]:
    """Roles whose main entry point has options: those the README tables describe."""
    out = []
    for path in sorted((ROOT / "roles").iterdir()):
        spec = path / "meta" / "argument_specs.yml"
        if spec.is_file() and (_load(spec)["argument_specs"].get("main") or {}).get("options"):
            out.append(path.name)
    return out


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def markdown(text: str) -> str:
    """Ansible markup to Markdown, safe in a table cell."""
    text = _LINK.sub(lambda m: f"[{m.group(1)}]({m.group(2)})", text)
    text = _URL.sub(lambda m: f"<{m.group(1)}>", text)
    text = _OPTION_OF.sub(lambda m: f"`{m.group(2)}` of `{m.group(1)}`", text)
    text = _PLUGIN.sub(lambda m: f"`{m.group(1)}`", text)
    text = _CODE.sub(lambda m: f"`{m.group(1)}`", text)
    text = _ITALIC.sub(lambda m: f"*{m.group(1)}*", text)
    text = _BOLD.sub(lambda m: f"**{m.group(1)}**", text)
    return " ".join(text.split()).replace("|", "\\|")


def _paragraphs(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def describe(spec: dict) -> str:
    """The option's whole description, its choices and, for a dict or list of dicts, its keys."""
    text = " ".join(markdown(p) for p in _paragraphs(spec.get("description")))
    if spec.get("choices"):
        text += " Choices: " + ", ".join(f"`{markdown(str(_yaml_scalar(c)))}`" for c in spec["choices"]) + "."
    keys = spec.get("options") or spec.get("suboptions")
    if keys:
        names = [f"`{k}`" + (" (required)" if v.get("required") else "") for k, v in keys.items()]
        text += " Keys: " + ", ".join(names) + "."
    return text


def _yaml_scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def default(name: str, value, role: str) -> str:
    """The default as defaults/main.yml sets it, in a table cell."""
    if isinstance(value, str):
        match = re.fullmatch(r"\{\{\s*(_[a-z0-9_]+)\s*\}\}", value)
        vars_file = ROOT / "roles" / role / "vars" / "main.yml"
        if match and vars_file.is_file() and match.group(1) in _load(vars_file):
            kind = {list: "list", dict: "mapping"}.get(type(_load(vars_file)[match.group(1)]), "value")
            return f"{kind}, see `vars/main.yml` (`{match.group(1)}`)"
        return f"`{markdown(value)}`" if value else '`""`'
    if isinstance(value, (dict, list)):
        inline = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()
        if len(inline) <= _INLINE_MAX:
            return f"`{markdown(inline)}`"
        return ("mapping" if isinstance(value, dict) else "list") + ", see `defaults/main.yml`"
    return f"`{_yaml_scalar(value)}`"


def table(role: str) -> str:
    base = ROOT / "roles" / role
    options = _load(base / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = _load(base / "defaults" / "main.yml")
    rows = [BEGIN, "",
            f"Every variable of the role, with its default (`defaults/main.yml`) and its description, which is the "
            f"role's argument spec (`ansible-doc -t role k8sgpu.nvidia.{role}` shows the same, with the types).", "",
            "| Variable | Default | Description |", "|---|---|---|"]
    for name, spec in options.items():
        rows.append(f"| `{name}` | {default(name, defaults.get(name, spec.get('default')), role)} | {describe(spec)} |")
    rows += ["", END]
    return "\n".join(rows)


def render(role: str, text: str) -> str:
    """The README's text with its variables table regenerated."""
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        if END not in rest:
            raise ValueError(f"roles/{role}/README.md: {BEGIN!r} without {END!r}")
        tail = rest.split(END, 1)[1]
        return head + table(role) + tail
    # First run: the hand-kept intro paragraph and table under "## Variables" become the generated block.
    match = re.search(r"^## Variables\n\n(?:(?!\| Variable)(?!## ).*\n)*?(\| Variable \|.*\n(?:\|.*\n)*)",
                      text, flags=re.M)
    if not match:
        raise ValueError(f"roles/{role}/README.md has no '## Variables' table")
    start = match.start() + len("## Variables\n\n")
    return text[:start] + table(role) + "\n" + text[match.end():]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale, missing = [], []
    for role in roles():
        path = ROOT / "roles" / role / "README.md"
        name = str(path.relative_to(ROOT))
        if not path.is_file():
            missing.append(name)
            continue
        text = path.read_text()
        new = render(role, text)
        if new != text:
            stale.append(name)
            if not check:
                path.write_text(new)
                print(f"rewrote {name}")
    for name in missing:
        print(f"{name} is missing: write one with a '## Variables' section", file=sys.stderr)
    if check and stale:
        print("out of step with meta/argument_specs.yml (run python tests/support/role_readmes.py): "
              + ", ".join(stale), file=sys.stderr)
    return 1 if missing or (check and stale) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
