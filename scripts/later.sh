#!/usr/bin/env bash
# Runs capper's tests as if today were DAYS days later (default 400): a
# test that pins a date against a real clock (an expiry on the Redis
# server's clock computed from a fixed date, a fixed date compared with
# time.Now) fails here today rather than in CI on that day.
#
# Both clocks move: the tests' Go code is built with a copy of the Go
# toolchain whose time.Now is shifted (the runtime's wall clock, not the
# monotonic one), and every redis-server the tests start runs with a small
# LD_PRELOAD shim that shifts its wall clock by as much. kfake runs in the
# tests' process, so it moves with them.
#
#   scripts/later.sh                     # every package, 400 days later
#   DAYS=3650 scripts/later.sh ./internal/capping/ -run TestUserLimits
#
# Needs gcc (installed with apt-get when missing) and about 300 MB under
# $LATER_DIR (default /tmp/capper-later) for the shifted toolchain.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
days=${DAYS:-400}
dir=${LATER_DIR:-/tmp/capper-later}
shift_s=$((days * 86400))
goroot=$(go env GOROOT)

"$root/scripts/ensure-deps.sh"
if ! command -v gcc >/dev/null; then
  echo "later: installing gcc (apt-get)"
  if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq gcc >/dev/null
fi

# The shifted toolchain: a copy of GOROOT whose time.now adds the shift to
# the wall clock's seconds (linux/amd64's assembly; other platforms are not
# supported here).
stamp="$dir/go.stamp"
want="$goroot $(go env GOVERSION) $shift_s"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  case "$(go env GOOS)/$(go env GOARCH)" in
    linux/amd64) ;;
    *) echo "later: only linux/amd64 is supported" >&2; exit 2 ;;
  esac
  rm -rf "$dir/go"
  mkdir -p "$dir"
  cp -a "$goroot" "$dir/go"
  asm="$dir/go/src/runtime/time_linux_amd64.s"
  line=$'\tMOVQ\t16(SP), AX\t// realtime sec'
  grep -qF "$line" "$asm" || { echo "later: $asm changed; update this script" >&2; exit 1; }
  awk -v s="$shift_s" -v line="$line" '{ print } $0 == line { printf "\tADDQ\t$%d, AX\t// capper scripts/later.sh\n", s }' "$asm" > "$asm.new"
  mv "$asm.new" "$asm"
  echo "$want" > "$stamp"
fi

# The shim: redis-server's clock_gettime, gettimeofday and time, shifted.
mkdir -p "$dir/bin"
cat > "$dir/shift.c" <<'EOF'
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
static long off(void) { const char *s = getenv("CAPPER_LATER_SECONDS"); return s ? atol(s) : 0; }
int clock_gettime(clockid_t c, struct timespec *ts) {
  int r = syscall(SYS_clock_gettime, c, ts);
  if (r == 0 && (c == CLOCK_REALTIME || c == CLOCK_REALTIME_COARSE)) ts->tv_sec += off();
  return r;
}
int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  int r = syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
  (void)tz;
  if (r == 0 && tv) { tv->tv_sec = ts.tv_sec + off(); tv->tv_usec = ts.tv_nsec / 1000; }
  return r;
}
time_t time(time_t *t) {
  struct timespec ts;
  syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
  time_t v = ts.tv_sec + off();
  if (t) *t = v;
  return v;
}
EOF
gcc -shared -fPIC -O2 -o "$dir/shift.so" "$dir/shift.c"
real=$(command -v redis-server)
cat > "$dir/bin/redis-server" <<EOF
#!/bin/sh
CAPPER_LATER_SECONDS=$shift_s LD_PRELOAD=$dir/shift.so exec $real "\$@"
EOF
chmod +x "$dir/bin/redis-server"

[ $# -gt 0 ] || set -- ./...
echo "later: go test $* as of $(date -u -d "@$(( $(date +%s) + shift_s ))" +%F) ($days days later)"
cd "$root"
PATH="$dir/go/bin:$dir/bin:$PATH" CAPPER_REQUIRE_SERVERS=1 go test -count=1 -timeout 45m "$@"
