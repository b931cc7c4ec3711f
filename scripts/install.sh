#!/usr/bin/env bash
# Installs botvisord and botvisorctl for the current user, with the systemd user unit and the
# D-Bus activation file (Linux) or the launchd agent (macOS). See docs/install.md.
#
#   scripts/install.sh              build (release) and install into ~/.local
#   scripts/install.sh --no-build   install target/release/ as it is (built before)
#   scripts/install.sh --uninstall  remove what install put there (the database stays)
#   PREFIX=/usr/local sudo -E scripts/install.sh --system   for every user (systemd --global)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=install
scope=user
build=yes
for a in "$@"; do
  case "$a" in
    --uninstall) mode=uninstall ;;
    --system) scope=system ;;
    --no-build) build=no ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done
if [ "$scope" = system ]; then
  prefix="${PREFIX:-/usr/local}"
  unit_dir="$prefix/lib/systemd/user"
  dbus_dir="$prefix/share/dbus-1/services"
else
  prefix="${PREFIX:-$HOME/.local}"
  unit_dir="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
  dbus_dir="${XDG_DATA_HOME:-$HOME/.local/share}/dbus-1/services"
fi
bindir="$prefix/bin"
docdir="$prefix/share/doc/botvisor"
os="$(uname -s)"
agents="$HOME/Library/LaunchAgents"
logdir="$HOME/Library/Logs/botvisor"

fill() { sed -e "s|@BINDIR@|$bindir|g" -e "s|@DOCDIR@|$docdir|g" -e "s|@LOGDIR@|$logdir|g" "$1" > "$2"; }

if [ "$mode" = uninstall ]; then
  if [ "$os" = Darwin ]; then
    launchctl bootout "gui/$(id -u)/org.botvisor.botvisord" 2>/dev/null || true
    rm -f "$agents/org.botvisor.botvisord.plist"
  else
    systemctl --user disable --now botvisord.service 2>/dev/null || true
    rm -f "$unit_dir/botvisord.service" "$dbus_dir/org.botvisor.Botvisor1.service"
    systemctl --user daemon-reload 2>/dev/null || true
  fi
  rm -f "$bindir/botvisord" "$bindir/botvisorctl"
  rm -rf "$docdir"
  echo "uninstalled; the database in ${XDG_STATE_HOME:-$HOME/.local/state}/botvisor is kept"
  exit 0
fi

if [ "$build" = yes ]; then
  cargo build --release --locked --bins
elif [ ! -x target/release/botvisord ] || [ ! -x target/release/botvisorctl ]; then
  echo "no target/release/botvisord: build first (cargo build --release) or drop --no-build" >&2
  exit 1
fi
install -d "$bindir" "$docdir"
install -m 0755 target/release/botvisord target/release/botvisorctl "$bindir/"
install -m 0644 README.md docs/*.md dbus/org.botvisor.Botvisor1.xml "$docdir/"
if [ "$os" = Darwin ]; then
  install -d "$agents" "$logdir"
  fill packaging/launchd/org.botvisor.botvisord.plist "$agents/org.botvisor.botvisord.plist"
  echo "installed; start it with: launchctl bootstrap gui/$(id -u) $agents/org.botvisor.botvisord.plist"
else
  install -d "$unit_dir" "$dbus_dir"
  fill packaging/systemd/botvisord.service "$unit_dir/botvisord.service"
  fill packaging/dbus/org.botvisor.Botvisor1.service "$dbus_dir/org.botvisor.Botvisor1.service"
  if [ "$scope" = user ]; then
    systemctl --user daemon-reload 2>/dev/null || true
  fi
  echo "installed; enable it with: systemctl --user enable --now botvisord"
  echo "(or just call it: the first D-Bus call starts it)"
fi
