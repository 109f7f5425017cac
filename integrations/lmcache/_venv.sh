# Sourced by run-tests and run-bench: checks MEMKV_WHEEL / MEMKV_BIN and makes the pinned
# LMCache virtual environment ready in $venv (built with uv from requirements-test.txt,
# rebuilt only when that file or the Python version changes; uv's download cache stays in
# its usual place, so a rebuild on the same machine does not download again).

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${MEMKV_VENV_DIR:-$HOME/.cache/memkv/venvs}/lmcache"
python="${MEMKV_PYTHON:-python3.11}"
reqs="$here/requirements-test.txt"

die() { echo "$(basename "$0"): $*" >&2; exit 2; }

# --venv-only (run-tests' first argument): build the venv and stop; needs no wheel or server.
venv_only=0
[[ "${1:-}" == --venv-only ]] && venv_only=1
if [[ $venv_only == 0 ]]; then
    [[ -n "${MEMKV_WHEEL:-}" ]] || die "set MEMKV_WHEEL to the memkv wheel (built from bindings/python)"
    [[ -f "$MEMKV_WHEEL" ]] || die "MEMKV_WHEEL=$MEMKV_WHEEL: no such file"
    [[ -n "${MEMKV_BIN:-}" ]] || die "set MEMKV_BIN to the memkv server binary (e.g. target/release/memkv)"
    [[ -x "$MEMKV_BIN" ]] || die "MEMKV_BIN=$MEMKV_BIN: not an executable file"
    MEMKV_WHEEL="$(realpath "$MEMKV_WHEEL")"
    MEMKV_BIN="$(realpath "$MEMKV_BIN")"
    export MEMKV_BIN
fi
command -v "$python" >/dev/null || die "$python not found (set MEMKV_PYTHON to a Python 3.11 interpreter)"

if ! command -v uv >/dev/null; then
    echo "$(basename "$0"): installing uv with pip" >&2
    "$python" -m pip install --quiet uv || die "could not install uv (pip install uv)"
    command -v uv >/dev/null || die "uv installed but not on PATH"
fi

prepare_venv() {
    # The venv's identity: the pinned requirements and the interpreter version.
    local want stamp="$venv/.memkv-requirements-sha256"
    want="$( (cat "$reqs"; "$python" -c 'import sys; print(sys.version)') | sha256sum | cut -d' ' -f1)"
    if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
        echo "$(basename "$0"): building $venv from $(basename "$reqs") (first run downloads about 6 GB)"
        rm -rf "$venv"
        mkdir -p "$(dirname "$venv")"
        nice -n 10 uv venv --quiet --python "$python" "$venv"
        nice -n 10 uv pip install --quiet --python "$venv/bin/python" -r "$reqs"
        echo "$want" > "$stamp"   # written last: an interrupted build is redone
    fi
    [[ $venv_only == 1 ]] && return 0
    # The memkv wheel and this package change between runs; --no-deps keeps uv from
    # looking for "memkv" on PyPI.
    uv pip install --quiet --python "$venv/bin/python" --no-deps --reinstall "$MEMKV_WHEEL" "$here"
    rm -rf "$here/build" "$here"/src/*.egg-info
}
