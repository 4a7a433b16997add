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
started=$(date +%s)
profile="${PLANC_WHEEL_PROFILE:-dev}"
tools="${PLANC_WHEEL_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/planc-wheel-tools}"
# maturin builds the wheel; auditwheel repair (with patchelf) grafts the libraries the module
# links that a manylinux system lacks (libz3) into planc.libs/ and retags it.
if ! { [ -x "$tools/bin/maturin" ] && [ -x "$tools/bin/auditwheel" ] && [ -x "$tools/bin/patchelf" ]; } &&
  ! { { [ -x "$tools/bin/python" ] || python3 -m venv "$tools"; } &&
    "$tools/bin/pip" install -q --disable-pip-version-check "maturin>=1.9.4,<2" auditwheel patchelf; }; then
  echo "warning: could not install maturin and auditwheel; the Python wheel is not built or tested" >&2
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dist="${PLANC_WHEEL_OUT:-$work/dist}"
# Not maturin's own repair: it patches the module where cargo left it (target/maturin/ is a
# hard link of target/debug/deps/), so a second build that relinks nothing finds the module
# already naming the grafted libz3 and fails. auditwheel patches a copy inside the wheel.
PATH="$tools/bin:$PATH" maturin build --quiet -m python/Cargo.toml --profile "$profile" --strip \
  --auditwheel skip --out "$work/built"
PATH="$tools/bin:$PATH" auditwheel repair --wheel-dir "$dist" "$work"/built/planc-*.whl
wheels="$(ls -t "$dist"/planc-*.whl)"
wheel="${wheels%%$'\n'*}" # the newest, where PLANC_WHEEL_OUT holds earlier ones
built=$(date +%s)

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check --no-index "$wheel"
py="$work/venv/bin/python"
so="$("$py" -c 'import planc._planc as m; print(m.__file__)')"
# Read whole before matching: grep -q stops at its match, and ldd writing into the closed
# pipe would fail the pipeline under pipefail.
libs="$(ldd "$so")"
if ! grep -q 'planc\.libs/libz3' <<<"$libs"; then
  echo "error: $so does not load the libz3 the wheel carries:" >&2
  echo "$libs" >&2
  exit 1
fi
ok="$("$py" -c "import planc; print(planc.check('examples/gpt3-175b.tp')['ok'])")"
if [ "$ok" != True ]; then
  echo "error: planc.check('examples/gpt3-175b.tp')['ok'] is $ok, not True" >&2
  exit 1
fi
"$work/venv/bin/planc" --help >/dev/null
"$py" -m unittest discover --start-directory python/tests --pattern 'test_*.py'
echo "python wheel: $(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB; built in $((built - started)) s, tested in $(($(date +%s) - built)) s"
