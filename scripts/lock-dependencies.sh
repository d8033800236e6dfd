#!/usr/bin/env bash
# Re-pin requirements/runtime.lock and requirements/dev.lock, with hashes, to the versions the
# current .venv holds (the versions the tests passed with), using pip-tools in a venv of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP_TOOLS_VERSION=7.6.2
tools="${HOME}/.cache/tensor-fusion/pip-tools-${PIP_TOOLS_VERSION}"
if [ ! -x "$tools/bin/pip-compile" ]; then
    python3 -m venv "$tools"
    "$tools/bin/pip" install -q "pip-tools==${PIP_TOOLS_VERSION}"
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
.venv/bin/pip freeze --exclude-editable > "$constraints"
compile() {
    "$tools/bin/pip-compile" -q --generate-hashes --strip-extras --allow-unsafe \
        --constraint "$constraints" "$@" pyproject.toml
}
compile --output-file requirements/runtime.lock
compile --extra dev --output-file requirements/dev.lock
# No machine-specific paths in the committed files.
for lock in requirements/runtime.lock requirements/dev.lock; do
    sed -i "/^--find-links/d; s#-c ${constraints}#-c the tested environment (pip freeze)#; s#--constraint=${constraints} #--constraint=<pip freeze of the tested venv> #" "$lock"
done
echo "requirements/runtime.lock and requirements/dev.lock re-pinned"
