#!/usr/bin/env bash
# A second Python interpreter for before/after benchmarks of driver-side code (the driver
# harness, a driver, the bench's own processes), where HOSTD_BENCH_DAEMON is not enough:
# the daemon spawns drivers with `sys.executable -I -m <module>`, so PYTHONPATH cannot reach
# them.
#
#   scripts/hostd_dev/before_python.sh DIR TREE [OLD PATH...]
#
# DIR/venv/bin/python runs hostd, hostd_protocol, hostd_scripted and hostd_dev from a
# `git archive` of TREE (e.g. main), with each PATH put back as it was at OLD (removed when
# it did not exist there). Third-party packages come from this checkout's .venv. Every
# process a bench started with it runs that code: daemon, windows process, bare drivers, and
# the drivers the daemon spawns. Example (docs/benchmarks.md, finding 1, session 4):
#   scripts/hostd_dev/before_python.sh /tmp/before main a66b3d6 \
#     protocol/hostd_protocol/driver_harness.py protocol/hostd_protocol/framing.py \
#     protocol/hostd_protocol/driver_output.py drivers/scripted scripts/hostd_dev/bench/windows.py
#   /tmp/before/venv/bin/python -m hostd_dev.bench latency --scales 100x4   # before
#   .venv/bin/python -m hostd_dev.bench latency --scales 100x4              # after
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=$1 TREE=$2
shift 2
OLD=${1:-}
[ $# -gt 0 ] && shift
ROOT=$(pwd)
rm -rf "$DIR"
mkdir -p "$DIR/src"
git archive "$TREE" protocol hostd drivers/scripted scripts/hostd_dev | tar -x -C "$DIR/src"
for f in "$@"; do
  rm -rf "${DIR:?}/src/$f"
  if git cat-file -e "$OLD:$f" 2>/dev/null; then
    git archive "$OLD" "$f" | tar -x -C "$DIR/src"
  fi
done
BASE=$(.venv/bin/python -c 'import sys; print(sys.base_prefix)')/bin/python3
"$BASE" -m venv --without-pip "$DIR/venv"
SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
DEST=$("$DIR/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
# The archive first on sys.path; the editable finders of .venv rank after sys.path entries.
printf '%s\n' "$DIR/src" "$DIR/src/protocol" "$DIR/src/drivers/scripted" "$DIR/src/scripts" \
  > "$DEST/00-before.pth"
echo "import site; site.addsitedir('$SITE')" > "$DEST/zz-deps.pth"
"$DIR/venv/bin/python" -I -c "import hostd_protocol, hostd_scripted; print(hostd_protocol.__file__)"
