#!/usr/bin/env bash
# galaxy-importer on a built collection tarball, as galaxy.ansible.com runs it (tests/release/galaxy-importer.cfg),
# from its own venv (.venv-importer; ansible-core and ansible-lint of its own, nothing else on PATH).
# Fails when the importer fails OR logs an error: it exits 0 and says "completed successfully" even when ansible-doc
# failed (Galaxy then shows no documentation for the plugins of that batch). Warnings are printed, not fatal.
#   tests/release/importer.sh k8sgpu-nvidia-1.0.0.tar.gz
set -euo pipefail
tarball=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
venv=${IMPORTER_VENV:-$here/../../.venv-importer}
venv=$(cd "$venv" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rc=0
(cd "$work" && env -i HOME="$work" LANG=C.UTF-8 PATH="$venv/bin:/usr/bin:/bin" \
  GALAXY_IMPORTER_CONFIG="$here/galaxy-importer.cfg" \
  "$venv/bin/python" -m galaxy_importer.main "$tarball") >"$work/log" 2>&1 || rc=$?
grep -E '^(WARNING|ERROR)' "$work/log" | cut -c1-2000 || true
errors=$(grep -c '^ERROR' "$work/log" || true)
if [ "$rc" -ne 0 ] || [ "$errors" -ne 0 ] || ! grep -q '^Importer processing completed successfully' "$work/log" \
   || [ ! -s "$work/importer_result.json" ]; then
  echo "galaxy-importer: FAILED on $tarball (exit $rc, $errors error(s); full log below)" >&2
  cat "$work/log" >&2
  exit 1
fi
"$venv/bin/python" - "$work/importer_result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
docs = r["docs_blob"]["contents"]
missing = [c["content_name"] for c in docs if c["content_type"] == "module" and not c.get("doc_strings")]
if missing:
    sys.exit(f"galaxy-importer: no documentation for the modules {missing} (Galaxy would show none)")
print(f"galaxy-importer: clean ({len(docs)} contents, "
      f"{sum(1 for c in docs if c['content_type'] == 'module')} modules documented)")
PY
