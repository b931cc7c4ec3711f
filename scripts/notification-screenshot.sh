#!/usr/bin/env bash
# Makes docs/notifications.png: botvisor-notify's notifications as dunst shows them, on a private
# bus and an Xvfb screen, for two bots of the fake CLI (tests/fake_cli): one asking to run a
# command, one whose turn ended while nobody was looking. Everything it starts runs in a
# temporary folder and is stopped at the end.
#
# Needs: dbus-daemon, Xvfb, dunst, xwd and ImageMagick's convert (Debian: apt-get install
# dbus-daemon xvfb dunst x11-apps imagemagick), python3, cargo.
#
# Usage: scripts/notification-screenshot.sh [OUTPUT.png]   (default docs/notifications.png)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/notifications.png}"
convert=/usr/bin/convert
[ -x "$convert" ] || convert="$(command -v convert)"
for p in dbus-daemon dbus-send Xvfb dunst dunstctl xwd python3; do
  command -v "$p" >/dev/null || { echo "notification-screenshot.sh: $p is not installed" >&2; exit 1; }
done

cargo build --quiet --bins
bin="${CARGO_TARGET_DIR:-target}/debug"
tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Waits (at most 30 s) until the command succeeds.
wait_for() {
  for _ in $(seq 300); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  echo "notification-screenshot.sh: gave up waiting for: $*" >&2
  exit 1
}

dbus-daemon --session --nofork --print-address=3 3>"$tmp/address" &
pids+=($!)
wait_for test -s "$tmp/address"
export DBUS_SESSION_BUS_ADDRESS="$(head -1 "$tmp/address")"

Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp 3>"$tmp/display" 2>/dev/null &
pids+=($!)
wait_for test -s "$tmp/display"
export DISPLAY=":$(head -1 "$tmp/display")"

cat >"$tmp/dunstrc" <<'EOF'
[global]
    width = 420
    offset = 16x16
    origin = top-right
    font = DejaVu Sans 11
    markup = full
    format = "<b>%s</b>\n%b"
    padding = 10
    horizontal_padding = 12
    frame_width = 2
    separator_height = 2
    gap_size = 8
    corner_radius = 6
    icon_position = off
[urgency_low]
    background = "#2b303b"
    foreground = "#dfe1e8"
    frame_color = "#65737e"
    timeout = 0
[urgency_normal]
    background = "#2b303b"
    foreground = "#ffffff"
    frame_color = "#ebcb8b"
    timeout = 0
[urgency_critical]
    background = "#bf616a"
    foreground = "#ffffff"
    frame_color = "#ffffff"
    timeout = 0
EOF
dunst -config "$tmp/dunstrc" 2>"$tmp/dunst.log" &
pids+=($!)
# Without an activation: the session bus's own would start another dunst.
owned() {
  dbus-send --print-reply=literal --dest=org.freedesktop.DBus /org/freedesktop/DBus \
    org.freedesktop.DBus.NameHasOwner "string:$1" | grep -q true
}
wait_for owned org.freedesktop.Notifications

mkdir -p "$tmp/home" "$tmp/run" "$tmp/project/api-server" "$tmp/project/docs-writer"
HOME="$tmp/home" XDG_RUNTIME_DIR="$tmp/run" BOTVISOR_CLAUDE_BIN="$PWD/tests/fake_cli/fake_claude.py" \
  "$bin/botvisord" --database "$tmp/botvisor.db" 2>"$tmp/botvisord.log" &
pids+=($!)
wait_for "$bin/botvisorctl" list

HOME="$tmp/home" "$bin/botvisor-notify" 2>"$tmp/notify.log" &
pids+=($!)
wait_for grep -q "botvisord is on the bus" "$tmp/notify.log"

ctl() { "$bin/botvisorctl" "$@"; }
ctl create --cwd "$tmp/project/docs-writer" --name docs-writer --env FAKE_CLAUDE_STATE="$tmp/state" \
  --env FAKE_CLAUDE_PLAN='[{"mode": "normal", "reply": "Updated README.md and docs/notifications.md: the new section, the hook example and the screenshot."}]' >/dev/null
ctl send docs-writer "update the docs" >/dev/null
displayed() { [ "$(dunstctl count displayed)" -ge "$1" ]; }
wait_for displayed 1

ctl create --cwd "$tmp/project/api-server" --name api-server --env FAKE_CLAUDE_STATE="$tmp/state" \
  --env FAKE_CLAUDE_PLAN='[{"mode": "normal", "ask": {"tool": "Bash", "input": {"command": "cargo test --workspace -- --test-threads 2", "description": "Run the whole test suite"}}}]' >/dev/null
ctl send api-server "run the tests" >/dev/null 2>&1 &
pids+=($!)
wait_for displayed 2

xwd -root -silent >"$tmp/screen.xwd"
"$convert" "$tmp/screen.xwd" -crop 460x400+820+0 +repage -trim -bordercolor black -border 16 "$out"
echo "wrote $out"
