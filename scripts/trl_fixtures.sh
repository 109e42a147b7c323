#!/bin/bash
# Real TRL logs for the import tests (tests/fixtures/logs/trl): GRPOTrainer on a tiny model built locally,
# nine short CPU runs (about a minute). TRL goes into a venv of its own (VENV, default ../trl-venv beside the
# checkout), with the `trl` extra's packages of pyproject.toml; the project's .venv is not touched.
# Usage: scripts/trl_fixtures.sh OUT_DIR   (then copy OUT_DIR/trl to tests/fixtures/logs/trl)
set -eu
OUT=${1:?usage: scripts/trl_fixtures.sh OUT_DIR}
HERE=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-$HERE/../trl-venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  # the extra's requirements, read from pyproject.toml (one list of what TRL's runs need)
  mapfile -t REQS < <(python3 -c 'import tomllib,sys; print("\n".join(tomllib.load(open(sys.argv[1],"rb"))["project"]["optional-dependencies"]["trl"]))' "$HERE/pyproject.toml")
  "$VENV/bin/pip" install --quiet torch==2.13.0 "${REQS[@]}"
fi
"$VENV/bin/python" "$HERE/scripts/trl_fixtures.py" "$OUT"
