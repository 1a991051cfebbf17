#!/usr/bin/env bash
# The install docs/python.md gives a user, as a test: a venv over Debian's python3 that sees
# its dist-packages, `pip install --no-build-isolation ./python` taking the module this
# build made (nothing downloaded, nothing compiled again), then the installed package used
# from outside the repository.
#   install_test.sh PYTHON MODULE
# MODULE: the built _idem*.so (given, so that pip runs no build in a build directory that
# the test command may be compiling in at the same time).
set -euo pipefail
python="$1"
module="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m venv --system-site-packages "$work/venv"
# A copy of the package's folder: pip builds in the folder it is given, and the test must
# leave the source tree as it found it.
cp -r "$root/python" "$work/src"
IDEM_BUILD_PYTHON_MODULE="$module" "$work/venv/bin/pip" install --no-index --no-build-isolation \
  --quiet "$work/src"
cd "$work"
"$work/venv/bin/python" - <<'PY'
import pathlib, idem, idem._idem
assert "site-packages" in idem._idem.__file__, idem._idem.__file__
assert (pathlib.Path(idem.__file__).parent / "py.typed").exists()
assert (pathlib.Path(idem.__file__).parent / "_idem.pyi").exists()
assert idem.uuid7().version == 7
store = idem.Store("sqlite://:memory:")
with store.begin() as tx:
    assert tx.execute("SELECT 41 + 1 AS answer").one().answer == 42
print("installed:", idem._idem.__file__)
PY
