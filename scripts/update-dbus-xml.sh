#!/usr/bin/env bash
# Regenerates dbus/org.botvisor.Botvisor1.xml from what a freshly built botvisord serves, turning
# the doc comments of its introspection into org.gtk.GDBus.DocString annotations. Review the diff:
# the XML is the API contract (tests/fake/contract.rs keeps the two equal).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --bin botvisord
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/home" "$tmp/work"
dbus-daemon --session --nofork --print-address=1 --address="unix:path=$tmp/bus" > "$tmp/addr" 2>/dev/null &
while [ ! -s "$tmp/addr" ]; do sleep 0.05; done
export DBUS_SESSION_BUS_ADDRESS="$(head -1 "$tmp/addr")" HOME="$tmp/home"
BOTVISOR_CLAUDE_BIN=/bin/true "${CARGO_TARGET_DIR:-target}/debug/botvisord" --database "$tmp/db" 2>/dev/null &
until busctl --user status org.botvisor.Botvisor1 >/dev/null 2>&1; do sleep 0.05; done
bot=$(busctl --user call org.botvisor.Botvisor1 /org/botvisor/Botvisor1 org.botvisor.Botvisor1.Manager \
  CreateBot 'a{sv}' 1 cwd s "$tmp/work" | awk '{print $2}' | tr -d '"')
gdbus introspect --session --dest org.botvisor.Botvisor1 --object-path /org/botvisor/Botvisor1 --xml > "$tmp/root.xml"
gdbus introspect --session --dest org.botvisor.Botvisor1 --object-path "$bot" --xml > "$tmp/bot.xml"
python3 - "$tmp/root.xml" "$tmp/bot.xml" > dbus/org.botvisor.Botvisor1.xml <<'PY'
import re, sys
def iface(xml, name):
    return re.search(r'(  <interface name="%s">.*?\n  </interface>)' % re.escape(name), xml, re.S).group(1)
def docify(block):
    out, lines, i, pending = [], block.split('\n'), 0, None
    while i < len(lines):
        l = lines[i]
        if l.strip() == '<!--':
            j, doc = i + 1, []
            while lines[j].strip() != '-->':
                doc.append(lines[j].strip()); j += 1
            pending, i = ' '.join(doc), j + 1
            continue
        if pending is not None:
            ind = re.match(r'\s*', l).group(0)
            esc = pending.replace('&', '&amp;').replace('"', '&quot;').replace('<', '&lt;').replace('>', '&gt;')
            ann = f'{ind}  <annotation name="org.gtk.GDBus.DocString" value="{esc}"/>'
            if l.rstrip().endswith('/>'):
                tag = re.match(r'\s*<(\w+)', l).group(1)
                out += [l.rstrip()[:-2] + '>', ann, f'{ind}</{tag}>']
            else:
                out += [l, ann]
            pending = None
        else:
            out.append(l)
        i += 1
    return '\n'.join(out)
# For the code generators only (botvisord does not serve them; tests/fake/contract.rs leaves them
# out of its comparison, and tests/fake/codegen.rs builds and runs what the generators make):
# gdbus-codegen passes the descriptor's GUnixFDList, qdbusxml2cpp (Qt 5) is told the C++ type of
# each signature it does not know (dbus/qt/botvisor-types.h defines the Botvisor ones).
QT_TYPES = {
    'a{sv}': 'QVariantMap',
    'a(tsss)': 'BotvisorChatItemList',
    'a(sss)': 'BotvisorPermissionRequestList',
    'a{sas}': 'BotvisorPermissionModes',
    'a{ss}': 'BotvisorEnvironment',
    '(ssdt)': 'BotvisorPlanLimit',
    'a(ssxsa{sv})': 'BotvisorConversationList',
    'a(ssssdtt)': 'BotvisorSpendList',
    'aa{sv}': 'BotvisorScheduleList',
}
GLIB_FD_METHODS = {'OpenChatItem'}
def codegen(block):
    lines, out, i = block.split('\n'), [], 0
    while i < len(lines):
        l = lines[i]
        out.append(l)
        m = re.match(r'(\s*)<(method|signal|property) name="(\w+)"(?: type="([^"]+)")?', l)
        if m:
            ind, tag, name, ptype = m.groups()
            notes = []
            if tag == 'property' and ptype in QT_TYPES:
                notes.append(('org.qtproject.QtDBus.QtTypeName', QT_TYPES[ptype]))
            if tag != 'property':
                j, count = i + 1, {'in': 0, 'out': 0}
                while not lines[j].strip().startswith(f'</{tag}>'):
                    a = re.search(r'<arg name="\w+" type="([^"]+)"(?: direction="(\w+)")?', lines[j])
                    if a:
                        direction = a.group(2) or 'out'
                        if a.group(1) in QT_TYPES:
                            key = f'org.qtproject.QtDBus.QtTypeName.{direction.capitalize()}{count[direction]}'
                            notes.append((key, QT_TYPES[a.group(1)]))
                        count[direction] += 1
                    j += 1
            if tag == 'method' and name in GLIB_FD_METHODS:
                notes.append(('org.gtk.GDBus.C.UnixFD', 'true'))
            out += [f'{ind}  <annotation name="{k}" value="{v}"/>' for k, v in notes]
        i += 1
    return '\n'.join(out)
root, bot = open(sys.argv[1]).read(), open(sys.argv[2]).read()
print('''<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
<!--
  botvisor D-Bus API, version 1: the contract.

  Bus: the session bus. Name: org.botvisor.Botvisor1.
  /org/botvisor/Botvisor1 serves org.botvisor.Botvisor1.Manager,
  org.botvisor.Botvisor1.Schedules and org.freedesktop.DBus.ObjectManager; each bot is /org/botvisor/Botvisor1/<id> with
  org.botvisor.Botvisor1.Bot. Errors are org.botvisor.Botvisor1.Error.<Name>: NotFound,
  InvalidArgument, Busy, RuntimeUnavailable, AccessDenied, StorageUnavailable, NotSupported,
  LimitExceeded, Failed.

  tests/fake/contract.rs keeps this file equal (names, signatures, directions, annotations) to what
  botvisord serves; scripts/update-dbus-xml.sh regenerates it. docs/dbus-api.md explains it.
  The org.gtk.GDBus.C.* and org.qtproject.QtDBus.* annotations are for gdbus-codegen and
  qdbusxml2cpp (with dbus/qt/botvisor-types.h); tests/fake/codegen.rs builds and runs their code.
-->
<node>''')
print(codegen(docify(iface(root, 'org.botvisor.Botvisor1.Manager'))))
print(codegen(docify(iface(root, 'org.botvisor.Botvisor1.Schedules'))))
print(codegen(docify(iface(bot, 'org.botvisor.Botvisor1.Bot'))))
print('</node>')
PY
echo "wrote dbus/org.botvisor.Botvisor1.xml" >&2
