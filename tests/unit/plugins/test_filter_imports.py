"""The collection's filter plugins import nothing heavy (issue 24).

Ansible imports every filter file of the collection in each task that uses one of its filters (by FQCN), in
that task's own worker process. A filter file that pulls in the kubernetes client through module_utils costs
every such task about 0.35 s, which is what made fact-only tasks of site.yml cost 0.3 s each.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = r"""
import importlib, pathlib, sys
sys.path.insert(0, sys.argv[1])
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
import ansible.errors, ansible.plugins.filter.core  # what a task's worker has loaded already
before = set(sys.modules)
for f in sorted(pathlib.Path(sys.argv[2]).glob("*.py")):
    importlib.import_module("ansible_collections.k8sgpu.nvidia.plugins.filter." + f.stem)
heavy = sorted({m.split(".")[0] for m in set(sys.modules) - before}
               & {"kubernetes", "boto3", "botocore", "google", "urllib3", "requests", "cryptography"})
print(" ".join(heavy))
"""


def test_filter_files_do_not_import_client_libraries():
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / "collections"), str(ROOT / "plugins" / "filter")],
        capture_output=True, text=True, check=True)
    assert proc.stdout.split() == [], f"filter plugins import {proc.stdout.strip()}: import them where they are used"


def test_no_filter_file_imports_another():
    """Each filter file is one filter (issue 35): code two filters share is in plugins/module_utils, not in a filter file
    the other imports (Ansible loads a filter file as a plugin, not as a library, and names it after its filter)."""
    import re
    pattern = re.compile(r"^\s*(from\s+(ansible_collections\.k8sgpu\.nvidia\.plugins\.filter\b|\.)|"
                         r"import\s+ansible_collections\.k8sgpu\.nvidia\.plugins\.filter\b)", re.M)
    offenders = sorted(f.name for f in (ROOT / "plugins" / "filter").glob("*.py") if pattern.search(f.read_text()))
    assert offenders == [], f"filter files importing another filter file: {offenders}; move the shared code to module_utils"
