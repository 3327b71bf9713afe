#!/usr/bin/env bash
# The README's install step, as a user runs it: each requirements file of the collection (the ones the tarball
# ships: requirements.txt, -gke, -eks, -cert, -ee, which includes those four, and -eda, the rulebook's venv) installed
# with `pip install -r` into a fresh venv, once with the pip that Python 3.11 and 3.12 bundle (23.2.1, the oldest
# supported: what `python3 -m venv` gives) and once with the newest pip on PyPI. Fails when an install fails, when
# pip's resolver backtracks (it says "pip is looking at multiple versions of ...": kubernetes 37 against botocore's
# python-dateutil<3 made pip 23.2 download 144 botocore wheels without an end) or when one takes longer than the
# bound (REQUIREMENTS_INSTALL_TIMEOUT, 180 s).
#   tests/release/requirements_install.sh [requirements file ...]
# PYTHON picks the interpreter (default python3; make requirements-install passes lab/install-deps.sh --python's, 3.12
# or 3.13); pip's cache is the user's (warm in CI after the first run): PIP_NO_CACHE_DIR=1 measures a cold install.
# Prints each install's time and what it resolved.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-python3}
bound=${REQUIREMENTS_INSTALL_TIMEOUT:-180}
oldest_pip=23.2.1
if [ $# -gt 0 ]; then files=("$@"); else
  files=("$repo"/requirements.txt "$repo"/requirements-gke.txt "$repo"/requirements-eks.txt \
         "$repo"/requirements-cert.txt "$repo"/requirements-ee.txt "$repo"/requirements-eda.txt); fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'echo "requirements_install.sh: failed at line $LINENO" >&2' ERR
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# The two pips as wheels, downloaded once: each fresh venv gets its pip from them (offline).
"$python" -m venv "$work/oldest"
have=$("$work/oldest/bin/python" -m pip --version | cut -d' ' -f2)
[ "$have" = "$oldest_pip" ] || echo "note: $python bundles pip $have, not $oldest_pip: installing $oldest_pip" >&2
mkdir -p "$work/wheels"
"$work/oldest/bin/python" -m pip download -q --no-deps -d "$work/wheels/oldest" "pip==$oldest_pip"
"$work/oldest/bin/python" -m pip download -q --no-deps -d "$work/wheels/newest" pip
newest=$(basename "$work"/wheels/newest/pip-*.whl | cut -d- -f2)

rc=0
for pipv in oldest newest; do
  for f in "${files[@]}"; do
    name=$(basename "$f")
    env=$work/venv-$pipv-${name%.txt}
    "$python" -m venv "$env"
    v=$("$env/bin/python" -m pip --version | cut -d' ' -f2)
    if [ "$pipv" = newest ] || [ "$v" != "$oldest_pip" ]; then
      "$env/bin/python" -m pip install -q --no-index "$work"/wheels/$pipv/pip-*.whl
      v=$("$env/bin/python" -m pip --version | cut -d' ' -f2)
    fi
    t0=$(date +%s%N)
    r=0
    # --no-compile: the .pyc files are CPU only (a minute of a busy CI machine for -ee), not what is checked here.
    timeout "$bound" "$env/bin/python" -m pip install --no-compile --progress-bar off -r "$f" >"$work/log" 2>&1 || r=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    if [ "$r" -ne 0 ]; then
      rc=1
      if [ "$r" -eq 124 ]; then echo "FAILED: $name with pip $v: not installed after ${bound} s (the resolver backtracks?)" >&2
      else echo "FAILED: $name with pip $v (exit $r) after $ms ms:" >&2; fi
      tail -n 30 "$work/log" >&2
      continue
    fi
    back=$( (grep -o 'pip is looking at multiple versions of [^ ]*' "$work/log" || true) | sort -u | sed 's/.* of //' \
      | tr '\n' ' ')
    if [ -n "$back" ]; then
      rc=1; echo "FAILED: $name with pip $v: the resolver backtracks over $back($ms ms):" >&2
      grep -E '^(INFO|Collecting|  Downloading)' "$work/log" | tail -n 30 >&2
    fi
    "$env/bin/python" -m pip check >"$work/check" 2>&1 || { rc=1; echo "FAILED: pip check after $name with pip $v:" >&2; cat "$work/check" >&2; }
    pins=$("$env/bin/python" -m pip list --format=freeze 2>/dev/null \
      | grep -iE '^(kubernetes|boto3|botocore|python-dateutil|google-cloud-container|google-auth|cryptography|ansible-rulebook|aiohttp)==' \
      | tr '\n' ' ' || true)
    printf 'requirements install: %-22s pip %-7s %6d ms  %s\n' "$name" "$v" "$ms" "$pins"
    rm -rf "$env"
  done
done
[ "$rc" -eq 0 ] && echo "requirements install: every file installed with pip $oldest_pip and $newest within ${bound} s each"
exit $rc
