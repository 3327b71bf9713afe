#!/usr/bin/env bash
# ansible-test sanity for k8sgpu.nvidia, with the local Python, in a temporary
# ansible_collections tree built from the checkout's tracked files.
#
# Works on machines that reach PyPI but not ci-files.testing.ansible.com:
#  * ansible-test bootstraps pip into each sanity venv by running
#    ~/.ansible/test/cache/get_pip_<ver>.py, downloaded from that host if absent
#    (ansible/ansible#77304). We write a stand-in that installs pip from a wheel
#    cached from PyPI.
#  * ansible-test scrubs the environment of its subprocesses (PIP_CERT,
#    SSL_CERT_FILE... do not pass), so the stand-in also writes a venv-level
#    pip.conf carrying the CA bundle and index the machine's pip uses.
# Usage: tests/sanity/run.sh [extra ansible-test sanity arguments]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VENV:-$ROOT/.venv}
PY="$VENV/bin/python"
[ -x "$VENV/bin/ansible-test" ] || { echo "sanity: $VENV/bin/ansible-test missing; run make venv" >&2; exit 1; }
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
CACHE=$HOME/.ansible/test/cache

# pip version ansible-test installs into its sanity venvs.
PIP_VER=$("$PY" - <<'PYEOF'
import os, re, ansible_test
src = open(os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")).read()
print(re.search(r"default_packages = dict\(\s*pip='([^']+)'", src).group(1))
PYEOF
)
CA=${SANITY_CA:-${PIP_CERT:-$("$VENV/bin/pip" config get global.cert 2>/dev/null || true)}}
CA=${CA:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
INDEX=${PIP_INDEX_URL:-$("$VENV/bin/pip" config get global.index-url 2>/dev/null || true)}

mkdir -p "$CACHE/pip-wheels"
ls "$CACHE/pip-wheels/pip-$PIP_VER"-*.whl >/dev/null 2>&1 \
  || "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps -d "$CACHE/pip-wheels" "pip==$PIP_VER"

cat >"$CACHE/get_pip_${PIP_VER//./_}.py" <<PYEOF
"""Offline stand-in for ansible-test's get-pip-$PIP_VER.py (written by k8sgpu.nvidia tests/sanity/run.sh)."""
import glob, os, sys
WHEEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pip-wheels")
conf = ["[global]", "disable-pip-version-check = true"]
if os.path.exists("$CA"):
    conf.append("cert = $CA")
if "$INDEX":
    conf.append("index-url = $INDEX")
with open(os.path.join(sys.prefix, "pip.conf"), "w") as f:
    f.write("\n".join(conf) + "\n")
wheels = sorted(glob.glob(os.path.join(WHEEL_DIR, "pip-$PIP_VER-*.whl")))
if not wheels:
    sys.exit("get-pip stand-in: no pip-$PIP_VER wheel in " + WHEEL_DIR)
sys.path.insert(0, wheels[0])
from pip._internal.cli.main import main as pip_main
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.argv = ["pip"]
sys.exit(pip_main(["install", "--no-index", "--find-links", WHEEL_DIR, "--force-reinstall"] + args))
PYEOF

command -v shellcheck >/dev/null || echo "sanity: shellcheck not installed; ansible-test will skip the shellcheck test (apt-get install shellcheck)" >&2

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
RUN_DIR=$WORK/ansible_collections/k8sgpu/nvidia
mkdir -p "$RUN_DIR"
# Tracked and new files, as the collection would be built; collections/ is the
# checkout's self-link, not part of the collection.
(cd "$ROOT" && git ls-files -z -co --exclude-standard -- . ':!collections' | tar --null -T - -cf -) | tar -xf - -C "$RUN_DIR"
# The collections k8sgpu.nvidia depends on, from the venv's ansible package,
# beside it in the same tree (ansible-doc and validate-modules resolve doc
# fragments and module_utils there).
SITE=$("$PY" -c 'import ansible_collections; print(list(ansible_collections.__path__)[0])')
for ns in kubernetes community ansible amazon; do
  [ -d "$SITE/$ns" ] && ln -s "$SITE/$ns" "$WORK/ansible_collections/$ns"
done
cd "$RUN_DIR"
"$VENV/bin/ansible-test" sanity --python "$PYVER" --color no "$@"
