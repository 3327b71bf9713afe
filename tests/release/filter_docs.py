"""One Galaxy entry per filter: what tests/release/release_check.py asks of plugins/filter, done to a file.

galaxy-importer lists every .py of plugins/filter by its name and every filter's documentation file by its name, and
ansible-doc reads a filter's documentation from the .py that holds it whenever that .py has a DOCUMENTATION (every
filter of the file then shows it). So each filter is a .py named after it, holding only it, with its DOCUMENTATION,
EXAMPLES and RETURN inside (no .yml).

  tests/release/filter_docs.py inline FILE.py NAME.yml [NEW.py]
      move NAME.yml's documentation into FILE.py (renamed NEW.py when given: the filter's own name) and delete it
  tests/release/filter_docs.py split FILE.py NAME
      a new plugins/filter/NAME.py holding the filter NAME (its function imported from FILE.py) documented from
      NAME.yml, which is deleted; FILE.py's filters() no longer returns NAME. Then move the code both files use to
      plugins/module_utils: no filter file may import another (tests/unit/plugins/test_filter_imports.py)
Run from the repository root; fix the imports of a renamed file (grep tests/ plugins/ for it).
"""
from __future__ import annotations

import ast
import re
import sys
import textwrap
from pathlib import Path

import yaml

COMMENT = ("# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists\n"
           "# every filter .py and every documentation file, so a same-named pair showed the filter twice.\n")
HEADER = ("# Copyright: k8sgpu.nvidia contributors\n"
          "# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)\n")


def sections(text: str) -> dict[str, str]:
    """The raw text of each top-level key of a filter's .yml (DOCUMENTATION, EXAMPLES, RETURN), comments kept."""
    out: dict[str, list[str]] = {}
    key = None
    for line in text.split("\n"):
        m = re.match(r"^([A-Z_]+):\s*(.*)$", line)
        if m:
            key = m.group(1)
            out[key] = []
            if m.group(2) not in ("", "|", "|-"):
                raise SystemExit(f"{key}: {m.group(2)!r} after the key is not handled")
        elif key:
            out[key].append(line)
    res = {}
    for k, body in out.items():
        while body and not body[-1].strip():
            body.pop()
        res[k] = textwrap.dedent("\n".join(body)) + "\n"
    return res


def doc_block(yml: Path) -> str:
    text = yml.read_text()
    parsed = yaml.safe_load(text)
    secs = sections(text)
    if set(secs) != set(parsed):
        raise SystemExit(f"{yml}: top-level keys {sorted(secs)} vs {sorted(parsed)}")
    for k, raw in secs.items():
        same = raw == parsed[k] if isinstance(parsed[k], str) else yaml.safe_load(raw) == parsed[k]
        if not same or '"""' in raw or raw.rstrip().endswith("\\"):
            raise SystemExit(f"{yml}: {k} does not move as is")
    return "\n" + COMMENT + "".join(
        f'{"" if i == 0 else chr(10)}{k} = r"""\n{secs[k]}"""\n'
        for i, k in enumerate(k for k in ("DOCUMENTATION", "EXAMPLES", "RETURN") if k in secs))


def check_docs(src: str, yml_text: str, where: str) -> None:
    parsed = yaml.safe_load(yml_text)
    found = {}
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in parsed:
            found[node.targets[0].id] = node.value.value
    for k, v in parsed.items():
        got = found.get(k)
        if got is None or (got.lstrip("\n") != v if isinstance(v, str) else yaml.safe_load(got) != v):
            raise SystemExit(f"{where}: {k} differs from the .yml")


def inline(py: Path, yml: Path, new: Path | None = None) -> None:
    src = py.read_text()
    anchor = "from __future__ import annotations\n"
    if src.count(anchor) != 1:
        raise SystemExit(f"{py}: no single '{anchor.strip()}' to put the documentation after")
    src = src.replace(anchor, anchor + doc_block(yml), 1)
    check_docs(src, yml.read_text(), str(py))
    (new or py).write_text(src)
    if new and new != py:
        py.unlink()
    yml.unlink()
    print(f"{yml} -> {new or py}")


def filters_dict(src: str) -> ast.Dict:
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.FunctionDef) and node.name == "filters":
            for ret in ast.walk(node):
                if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict):
                    return ret.value
    raise SystemExit("no filters() returning a dict literal")


def split(py: Path, name: str) -> None:
    src = py.read_text()
    d = filters_dict(src)
    funcs = {k.value: v.id for k, v in zip(d.keys, d.values) if isinstance(k, ast.Constant) and isinstance(v, ast.Name)}
    if name not in funcs:
        raise SystemExit(f"{py} has no filter {name} (has {sorted(funcs)})")
    func = funcs[name]
    new_src, n = re.subn(rf'\s*"{re.escape(name)}":\s*{re.escape(func)},?', "", src, count=1)
    if n != 1 or name in {k.value for k in filters_dict(new_src).keys}:
        raise SystemExit(f"{py}: could not take {name} out of filters()")
    new_src = re.sub(r"\{\s*,", "{", new_src).replace(",}", "}").replace('{ "', '{"')
    module = "ansible_collections.k8sgpu.nvidia.plugins.filter." + py.stem
    yml = py.with_name(f"{name}.yml")
    body = (f'{HEADER}"""The {name} filter (its code is {py.stem}.py\'s, beside the filters it works with)."""\n'
            f"from __future__ import annotations\n"
            f"{doc_block(yml)}\n"
            f"from {module} import {func}\n\n\n"
            f"class FilterModule:\n"
            f"    def filters(self) -> dict:\n"
            f'        return {{"{name}": {func}}}\n')
    target = py.with_name(f"{name}.py")
    if target.exists():
        raise SystemExit(f"{target} exists")
    check_docs(body, yml.read_text(), str(target))
    target.write_text(body)
    py.write_text(new_src)
    yml.unlink()
    print(f"{name}: {yml.name} -> {target} (from {py.name})")


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "inline":
        inline(Path(args[0]), Path(args[1]), Path(args[2]) if len(args) > 2 else None)
    elif cmd == "split":
        split(Path(args[0]), args[1])
    else:
        raise SystemExit(__doc__)
