#!/usr/bin/env bash
# Every test suite: host, no-driver, gpu (skipped without a GPU), compile-fail and the examples in a normal
# build, then the host suites again under AddressSanitizer + UndefinedBehaviorSanitizer. Ends with the line
#   N passed, N failed, N skipped
# and exits non-zero when anything failed.
set -euo pipefail
source "$(dirname "$0")/../.ci/bootstrap.sh"
cd "$lg_root"

status=0
configure build
ninja -C build >/dev/null
meson test -C build --no-rebuild --print-errorlogs || status=1

configure build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dexamples=false
ninja -C build-asan >/dev/null
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
  meson test -C build-asan --no-rebuild --print-errorlogs --suite host || status=1

python3 - build/meson-logs/testlog.json build-asan/meson-logs/testlog.json <<'PY'
import json, sys
passed = failed = skipped = 0
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            r = json.loads(line)["result"]
            if r in ("OK", "EXPECTEDFAIL"): passed += 1
            elif r == "SKIP": skipped += 1
            else: failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
