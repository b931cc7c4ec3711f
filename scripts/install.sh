#!/usr/bin/env bash
# Installs botvisord, botvisorctl and botvisor-notify for the current user. See docs/install.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/install.sh [OPTIONS]

Builds botvisor (cargo build --release) and installs it for the current user: the binaries,
shell completions and the man page of botvisorctl, the docs, and the way the service starts:
a systemd user unit with D-Bus activation (Linux with a systemd user manager), a launchd agent
(macOS), or D-Bus activation alone with a log file (Linux without systemd); and botvisor-notify,
the desktop notifications (a systemd user unit with the graphical session, or an XDG autostart
entry without systemd; docs/notifications.md). It records where
the Claude Code CLI is in the configuration, because a service started by D-Bus or systemd does
not see your shell's PATH.

Options:
  --no-build        install what was built before (no cargo build)
  --bin-dir DIR     install the binaries found in DIR (for example ~/.cargo/bin after
                    `cargo install --path .`); implies --no-build
  --autostart       also install an XDG autostart entry that starts botvisord at login
                    (for desktops without a systemd user manager; botvisor-notify's is
                    installed there without it)
  --system          for every user: PREFIX (default /usr/local), systemd --global
  --uninstall       remove what this script installed (the database and config stay)
  -h, --help        this help

Environment:
  PREFIX            where to install (default ~/.local, or /usr/local with --system)
  CARGO_TARGET_DIR  where cargo builds (default ./target); the release binaries are taken
                    from $CARGO_TARGET_DIR/release
  CLAUDE_BIN        the Claude Code binary to record (default: `claude` on PATH)
EOF
}

cd "$(dirname "$0")/.."
mode=install
scope=user
build=yes
bin_src=""
autostart=no
while [ $# -gt 0 ]; do
  case "$1" in
    --uninstall) mode=uninstall ;;
    --system) scope=system ;;
    --no-build) build=no ;;
    --bin-dir)
      [ $# -ge 2 ] || { echo "install.sh: --bin-dir needs a folder" >&2; exit 2; }
      bin_src="$2"; build=no; shift ;;
    --autostart) autostart=yes ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

os="$(uname -s)"
config_home="${XDG_CONFIG_HOME:-$HOME/.config}"
data_home="${XDG_DATA_HOME:-$HOME/.local/share}"
state_home="${XDG_STATE_HOME:-$HOME/.local/state}"
if [ "$scope" = system ]; then
  prefix="${PREFIX:-/usr/local}"
  unit_dir="$prefix/lib/systemd/user"
  dbus_dir="$prefix/share/dbus-1/services"
  apps_dir="$prefix/share/applications"
  bash_dir="$prefix/share/bash-completion/completions"
  zsh_dir="$prefix/share/zsh/site-functions"
  fish_dir="$prefix/share/fish/vendor_completions.d"
else
  prefix="${PREFIX:-$HOME/.local}"
  unit_dir="$config_home/systemd/user"
  dbus_dir="$data_home/dbus-1/services"
  apps_dir="$data_home/applications"
  bash_dir="$data_home/bash-completion/completions"
  zsh_dir="$data_home/zsh/site-functions"
  fish_dir="$config_home/fish/completions"
fi
bindir="$prefix/bin"
docdir="$prefix/share/doc/botvisor"
mandir="$prefix/share/man/man1"
agents="$HOME/Library/LaunchAgents"
if [ "$os" = Darwin ]; then
  logdir="$HOME/Library/Logs/botvisor"
else
  logdir="$state_home/botvisor"
fi
config="$config_home/botvisor/config.toml"
autostart_file="$config_home/autostart/botvisord.desktop"
notify_autostart="$config_home/autostart/botvisor-notify.desktop"

# How this machine starts user services.
manager=none
if [ "$os" = Darwin ]; then
  manager=launchd
elif command -v systemctl >/dev/null 2>&1 && systemctl --user show-environment >/dev/null 2>&1; then
  manager=systemd
elif [ "$scope" = system ] && command -v systemctl >/dev/null 2>&1; then
  # For every user: their user managers read the unit, whatever root's session has.
  manager=systemd
fi

# The activation file, the desktop entries and the systemd units name these folders in
# double quotes (a space or a ' is fine); a character that each of those formats reads in its
# own way inside quotes, or that the launchd plist's XML or this script's sed would, is refused
# before anything is written.
for folder in "$bindir" "$logdir" "$docdir"; do
  case "$folder" in
    *[\"\\\`\$%\&\<\>\|]* | *[[:cntrl:]]*)
      echo "install.sh: cannot install with the folder $folder: the D-Bus activation file, the" \
        "desktop entries and the systemd units cannot name a path holding \", \\, \`, \$, %, &, <, >," \
        "| or a control character; choose another PREFIX (or XDG_STATE_HOME)" >&2
      exit 2 ;;
  esac
done
# A file:// URL's spaces, for systemd's Documentation=.
docurl=$(printf '%s' "$docdir" | sed 's/ /%20/g')

fill() {
  sed -e "s|@BINDIR@|$bindir|g" -e "s|@DOCDIR@|$docdir|g" -e "s|@DOCURL@|$docurl|g" \
    -e "s|@LOGDIR@|$logdir|g" "$1" > "$2"
}

# The session bus's address, as dbus-send would find it without starting a bus of its own
# (empty: none is running here).
session_bus() {
  if [ -n "${DBUS_SESSION_BUS_ADDRESS:-}" ]; then
    echo "$DBUS_SESSION_BUS_ADDRESS"
  elif [ -n "${XDG_RUNTIME_DIR:-}" ] && [ -S "$XDG_RUNTIME_DIR/bus" ]; then
    echo "unix:path=$XDG_RUNTIME_DIR/bus"
  fi
}

# A session bus started before the activation folder existed does not see the file until it
# reloads its configuration: asked to, then asked whether it lists the name now.
reload_bus() {
  local bus
  bus="$(session_bus)"
  if [ -z "$bus" ] || ! command -v dbus-send >/dev/null 2>&1; then
    echo "no session bus here (or no dbus-send): the session bus of your next login reads $dbus_dir"
    return
  fi
  dbus-send --bus="$bus" --type=method_call --print-reply --dest=org.freedesktop.DBus \
    /org/freedesktop/DBus org.freedesktop.DBus.ReloadConfig >/dev/null 2>&1 || true
  if dbus-send --bus="$bus" --print-reply --dest=org.freedesktop.DBus /org/freedesktop/DBus \
    org.freedesktop.DBus.ListActivatableNames 2>/dev/null | grep -q '"org.botvisor.Botvisor1"'; then
    echo "the session bus lists org.botvisor.Botvisor1 now: the first call starts $bindir/botvisord"
  else
    echo "install.sh: the session bus does not list org.botvisor.Botvisor1 after ReloadConfig; it may not" >&2
    echo "read $dbus_dir (botvisorctl doctor says more); start botvisord yourself meanwhile" >&2
  fi
}

# A botvisord this installation runs (its binary is $bindir/botvisord): stopped gently, as
# systemctl stop would, waiting up to 30 s for each to stop its bots.
stop_running() {
  local pid stopped=""
  for pid in $(pgrep -x botvisord 2>/dev/null || true); do
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$bindir/botvisord" ] || continue
    kill -TERM "$pid" 2>/dev/null && stopped="$stopped $pid"
  done
  for pid in $stopped; do
    for _ in $(seq 300); do
      # Gone, or a zombie its parent has not reaped yet.
      case "$(ps -o stat= -p "$pid" 2>/dev/null)" in "" | Z*) break ;; esac
      sleep 0.1
    done
    echo "stopped the botvisord that ran (pid $pid)"
  done
}

if [ "$mode" = uninstall ]; then
  case "$manager" in
    launchd)
      launchctl bootout "gui/$(id -u)/org.botvisor.botvisord" 2>/dev/null || true
      rm -f "$agents/org.botvisor.botvisord.plist" ;;
    systemd)
      systemctl --user disable --now botvisor-notify.service 2>/dev/null || true
      systemctl --user disable --now botvisord.service 2>/dev/null || true
      # The schedules' timers (botvisord writes them again from its database when it is back).
      schedule_dir="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
      for timer in "$schedule_dir"/botvisor-schedule-*.timer; do
        [ -e "$timer" ] || continue
        systemctl --user disable --now "$(basename "$timer")" 2>/dev/null || true
      done
      rm -f "$schedule_dir"/botvisor-schedule-*.timer "$schedule_dir"/botvisor-schedule-*.service ;;
  esac
  stop_running
  rm -f "$unit_dir/botvisord.service" "$unit_dir/botvisor-notify.service" "$unit_dir/botvisor.slice" \
    "$dbus_dir/org.botvisor.Botvisor1.service" "$autostart_file" "$notify_autostart" \
    "$apps_dir/botvisor-notify.desktop"
  [ "$manager" = systemd ] && { systemctl --user daemon-reload || echo "install.sh: systemctl --user daemon-reload failed" >&2; }
  rm -f "$bindir/botvisord" "$bindir/botvisorctl" "$bindir/botvisor-notify" "$mandir/botvisorctl.1" \
    "$bash_dir/botvisorctl" "$zsh_dir/_botvisorctl" "$fish_dir/botvisorctl.fish"
  rm -rf "$docdir"
  # The copies `cargo install --path .` made (README) go too.
  if command -v cargo >/dev/null 2>&1 && cargo install --list 2>/dev/null | grep -q '^botvisor v'; then
    cargo uninstall botvisor && echo "removed the cargo install copies (cargo uninstall botvisor)"
  fi
  echo "uninstalled; kept the database ($state_home/botvisor) and the configuration ($config)"
  exit 0
fi

# The binaries: built here, found in CARGO_TARGET_DIR, or given.
if [ -z "$bin_src" ]; then
  bin_src="${CARGO_TARGET_DIR:-target}/release"
  if [ "$build" = yes ]; then
    cargo build --release --locked --bins
  fi
fi
for b in botvisord botvisorctl botvisor-notify; do
  if [ ! -x "$bin_src/$b" ]; then
    echo "install.sh: no $bin_src/$b; build first (cargo build --release), or give --bin-dir DIR" >&2
    exit 1
  fi
done

install -d "$bindir" "$docdir" "$mandir" "$bash_dir" "$zsh_dir" "$fish_dir" "$apps_dir"
install -m 0755 "$bin_src/botvisord" "$bin_src/botvisorctl" "$bin_src/botvisor-notify" "$bindir/"
# Its name is the desktop-entry hint of botvisor-notify's notifications.
fill packaging/xdg/botvisor-notify.desktop "$apps_dir/botvisor-notify.desktop"
install -m 0644 README.md docs/*.md dbus/org.botvisor.Botvisor1.xml "$docdir/"
"$bindir/botvisorctl" man > "$mandir/botvisorctl.1"
"$bindir/botvisorctl" completions bash > "$bash_dir/botvisorctl"
"$bindir/botvisorctl" completions zsh > "$zsh_dir/_botvisorctl"
"$bindir/botvisorctl" completions fish > "$fish_dir/botvisorctl.fish"
echo "installed botvisord, botvisorctl and botvisor-notify in $bindir (man page, bash, zsh and fish completions too)"

# Where Claude Code is, for a service that does not see this shell's PATH.
claude="${CLAUDE_BIN:-$(command -v claude 2>/dev/null || true)}"
if [ "$scope" = user ]; then
  install -d "$(dirname "$config")"
  if [ -f "$config" ] && grep -Eq '^[[:space:]]*claude_bin[[:space:]]*=' "$config"; then
    echo "kept claude_bin in $config"
  elif [ -n "$claude" ]; then
    claude="$(cd "$(dirname "$claude")" && pwd)/$(basename "$claude")"
    # A TOML basic string: backslashes and double quotes escaped.
    toml_path=${claude//\\/\\\\}
    toml_path=${toml_path//\"/\\\"}
    printf '# Recorded by scripts/install.sh: the service does not see your shell'"'"'s PATH.\nclaude_bin = "%s"\n' "$toml_path" >> "$config"
    echo "recorded claude_bin = \"$claude\" in $config"
  else
    echo "no claude on PATH: install Claude Code (npm install -g @anthropic-ai/claude-code), then set"
    echo "  claude_bin = \"/path/to/claude\"   in $config"
  fi
  if [ -f "$config" ] && grep -Eq '^[[:space:]]*codex_bin[[:space:]]*=' "$config"; then
    :
  elif command -v codex >/dev/null 2>&1; then
    echo "for Codex bots: the service does not see this shell's PATH either; set codex_bin to the"
    echo "  native binary in $config (docs/install.md#codex; botvisorctl doctor names it)"
  fi
  if ! "$bindir/botvisord" --check-config >/dev/null; then
    echo "install.sh: $config has a problem; botvisord --check-config says:" >&2
    "$bindir/botvisord" --check-config >&2 || true
    exit 1
  fi
fi

case "$manager" in
  launchd)
    install -d "$agents"
    install -d -m 0700 "$logdir"
    fill packaging/launchd/org.botvisor.botvisord.plist "$agents/org.botvisor.botvisord.plist"
    echo "installed the launchd agent $agents/org.botvisor.botvisord.plist"
    echo "start it now and at every login with:"
    echo "  launchctl bootstrap gui/$(id -u) $agents/org.botvisor.botvisord.plist"
    echo "it logs to $logdir/botvisord.log" ;;
  systemd)
    install -d "$unit_dir" "$dbus_dir"
    fill packaging/systemd/botvisord.service "$unit_dir/botvisord.service"
    fill packaging/systemd/botvisor.slice "$unit_dir/botvisor.slice"
    fill packaging/systemd/botvisor-notify.service "$unit_dir/botvisor-notify.service"
    fill packaging/dbus/org.botvisor.Botvisor1.service "$dbus_dir/org.botvisor.Botvisor1.service"
    if [ "$scope" = user ]; then
      if ! systemctl --user daemon-reload; then
        echo "install.sh: systemctl --user daemon-reload failed; the unit is installed but systemd has not read it" >&2
        exit 1
      fi
      echo "installed the systemd user unit $unit_dir/botvisord.service"
      echo "start it now and at every login with:"
      echo "  systemctl --user enable --now botvisord"
      echo "(or do nothing: the first D-Bus call, such as botvisorctl list, starts it)"
      reload_bus
      echo "its log: journalctl --user -u botvisord"
      echo "desktop notifications when a bot needs you (docs/notifications.md), with every graphical session:"
      echo "  systemctl --user enable --now botvisor-notify"
    else
      echo "installed the units in $unit_dir; enable them for every user with:"
      echo "  systemctl --global enable botvisord botvisor-notify"
    fi ;;
  none)
    install -d "$dbus_dir"
    # The state folder (the log, the database) is the user's alone, as botvisord makes it.
    install -d -m 0700 "$logdir"
    fill packaging/dbus/org.botvisor.Botvisor1.service "$dbus_dir/org.botvisor.Botvisor1.service"
    echo "no systemd user manager here (and not macOS): nothing to enable."
    echo "botvisord starts by D-Bus activation on the first call (botvisorctl list, a panel), when"
    echo "your session bus reads $dbus_dir; it logs to $logdir/botvisord.log"
    reload_bus
    echo "or run it yourself in a terminal: $bindir/botvisord"
    install -d "$(dirname "$notify_autostart")"
    fill packaging/xdg/botvisor-notify.desktop "$notify_autostart"
    echo "installed the autostart entry $notify_autostart: your desktop starts botvisor-notify"
    echo "(desktop notifications when a bot needs you, docs/notifications.md) at login"
    if [ "$autostart" = yes ]; then
      install -d "$(dirname "$autostart_file")"
      fill packaging/xdg/botvisord.desktop "$autostart_file"
      echo "installed the autostart entry $autostart_file: your desktop starts botvisord at login"
    else
      echo "or start it at every login with an autostart entry: scripts/install.sh --autostart"
    fi ;;
esac
