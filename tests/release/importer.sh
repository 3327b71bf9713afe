#!/usr/bin/env bash
# galaxy-importer on a built collection tarball, as galaxy.ansible.com runs it (tests/release/galaxy-importer.cfg),
# from its own venv (.venv-importer; ansible-core and ansible-lint of its own, nothing else on PATH).
# Fails when the importer fails OR logs an error: it exits 0 and says "completed successfully" even when ansible-doc
# failed (Galaxy then shows no documentation for the plugins of that batch). Fails on a warning that
# tests/release/importer-expected-warnings.txt does not list (those need the dependencies installed, which Galaxy
# does not do); an expected pattern that no warning matches any more is printed as a note.
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
expected=$here/importer-expected-warnings.txt
patterns=$(grep -vE '^[[:space:]]*(#|$)' "$expected")
warnings=$(grep '^WARNING' "$work/log" | sed -E 's/^WARNING:?[[:space:]]*//' || true)
unexpected=$(grep -vE -f <(printf '%s\n' "$patterns") <<<"$warnings" || true)
if [ -n "$unexpected" ]; then
  echo "galaxy-importer: warnings not in $expected (fix them, or list one that needs the dependencies installed):" >&2
  echo "$unexpected" >&2
  exit 1
fi
while IFS= read -r p; do
  grep -qE -- "$p" <<<"$warnings" || echo "galaxy-importer: note: no warning matches the expected pattern '$p' any more (remove it)"
done <<<"$patterns"
"$venv/bin/python" - "$work/importer_result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
docs = r["docs_blob"]["contents"]
missing = [c["content_name"] for c in docs if c["content_type"] == "module" and not c.get("doc_strings")]
if missing:
    sys.exit(f"galaxy-importer: no documentation for the modules {missing} (Galaxy would show none)")
filters = [c for c in docs if c["content_type"] == "filter"]
names = [c["content_name"] for c in filters]
twice = sorted({n for n in names if names.count(n) > 1})
bare = sorted(c["content_name"] for c in filters if not c.get("doc_strings"))
print(f"galaxy-importer: clean ({len(docs)} contents, "
      f"{sum(1 for c in docs if c['content_type'] == 'module')} modules documented; {len(filters)} filter entries"
      + (f", listed twice: {twice}" if twice else "") + (f", undocumented: {bare}" if bare else "") + ")")
PY
