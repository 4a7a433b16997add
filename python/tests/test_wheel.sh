#!/usr/bin/env bash
# Builds planc's wheel with maturin, installs it in a fresh virtual environment and tests it
# there: the line the issue judges by, the console script, libz3 vendored into the wheel, then
# python/tests/test_module.py. CI runs it after `cargo test --workspace`: the wheel's build
# (profile dev, the default here) reuses that build's target folder and compiles only pyo3
# and the module. PLANC_WHEEL_PROFILE=release builds the wheel one would publish;
# PLANC_WHEEL_OUT=DIR keeps the wheel there. Without maturin (no package index) it warns and
# passes.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
profile="${PLANC_WHEEL_PROFILE:-dev}"
tools="${PLANC_WHEEL_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/planc-wheel-tools}"
# maturin builds the wheel and, with patchelf, grafts the libraries it links that a
# manylinux system lacks (libz3) into planc.libs/, as auditwheel repair does.
if ! { [ -x "$tools/bin/maturin" ] && [ -x "$tools/bin/patchelf" ]; } &&
  ! { { [ -x "$tools/bin/python" ] || python3 -m venv "$tools"; } &&
    "$tools/bin/pip" install -q --disable-pip-version-check "maturin[patchelf]>=1.9.4,<2"; }; then
  echo "warning: could not install maturin; the Python wheel is not built or tested" >&2
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dist="${PLANC_WHEEL_OUT:-$work/dist}"
PATH="$tools/bin:$PATH" maturin build --quiet -m python/Cargo.toml --profile "$profile" --strip \
  --out "$dist"
wheel="$(ls -t "$dist"/planc-*.whl | head -1)"
built=$SECONDS

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check --no-index "$wheel"
py="$work/venv/bin/python"
so="$("$py" -c 'import planc._planc as m; print(m.__file__)')"
if ! ldd "$so" | grep -q 'planc\.libs/libz3'; then
  echo "error: $so does not load the libz3 the wheel carries:" >&2
  ldd "$so" >&2
  exit 1
fi
ok="$("$py" -c "import planc; print(planc.check('examples/gpt3-175b.tp')['ok'])")"
if [ "$ok" != True ]; then
  echo "error: planc.check('examples/gpt3-175b.tp')['ok'] is $ok, not True" >&2
  exit 1
fi
"$work/venv/bin/planc" --help >/dev/null
"$py" -m unittest discover --start-directory python/tests --pattern 'test_*.py'
echo "python wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB; built in $((built - started)) s, tested in $((SECONDS - built)) s"
