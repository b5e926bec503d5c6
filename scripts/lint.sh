# Sourced by ./dev. The checks CI runs before the tests (.ci/run); configured in pyproject.toml.
# Every check runs, even after one fails, so one pass lists every finding; lint returns 1 when any failed.

LINT_PATHS=(drill faults tests bench)

lint() {
  local failed=() started=$SECONDS
  lint_step "ruff check" "$VENV/bin/ruff" check --output-format concise "${LINT_PATHS[@]}" || failed+=("ruff check")
  lint_step "ruff format --check" "$VENV/bin/ruff" format --check --output-format concise "${LINT_PATHS[@]}" || failed+=("ruff format")
  lint_step "mypy (drill, faults)" "$VENV/bin/mypy" || failed+=("mypy")
  lint_step "lint-imports (layer contracts)" "$VENV/bin/lint-imports" --no-logo || failed+=("lint-imports")
  if [ "${#failed[@]}" -gt 0 ]; then
    log "lint failed in $((SECONDS - started)) s: ${failed[*]} (fix: ruff check --fix, ruff format; see CONTRIBUTING.md)"
    return 1
  fi
  log "lint clean in $((SECONDS - started)) s"
}

lint_step() {  # lint_step NAME COMMAND...: run COMMAND, say NAME and whether it passed
  local name="$1"; shift
  log "lint: $name"
  "$@"
}

# The whole suite (./dev test without arguments) starts with the linters: in the background as soon as the project
# is installed, beside the rest of the set-up (Toxiproxy's build, the Debian packages, dockerd), and waited for before
# the first test. A finding stops ./dev test there, as it stops CI (.ci/run runs ./dev test), before the 40 minutes of
# tests. Run one after the other, the linters added their whole time (31 s cold, 2026-12-06) to CI's set-up.
start_lint() {
  log "the linters run beside the rest of the set-up (log in $VENV/lint.log)"
  ( lint ) >"$VENV/lint.log" 2>&1 &
  LINT_PID=$!
}

wait_lint() {  # the linters started by start_lint: their output, and 1 when one found something
  local rc=0
  wait "$LINT_PID" || rc=$?
  cat "$VENV/lint.log" >&2
  if [ "$rc" -ne 0 ]; then
    log "the tests do not start: fix what the linters found (or run ./dev test PATHS to run tests anyway)"
    return 1
  fi
}
