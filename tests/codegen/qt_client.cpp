// A client made from dbus/org.botvisor.Botvisor1.xml by qdbusxml2cpp, with
// dbus/qt/botvisor-types.h, as a KDE developer starts one (tests/codegen.rs builds and runs it
// against botvisord). Usage:
//   qt_client BOT_ID SEQ
// Prints the runtimes of PermissionModes, the bot's path, its State, the number of chat items,
// the number of pending permission requests, then chat item SEQ's payload read through
// OpenChatItem's descriptor.
#include <QtCore/QCoreApplication>
#include <QtCore/QFile>
#include <QtCore/QTextStream>
#include <cstdio>
#include <cstdlib>

#include "botvisor_proxy.h"

static void die(const QString &what)
{
    fprintf(stderr, "%s\n", qPrintable(what));
    std::exit(1);
}

int main(int argc, char **argv)
{
    QCoreApplication app(argc, argv);
    if (argc != 3)
        die("usage: qt_client BOT_ID SEQ");
    botvisorRegisterTypes();
    QTextStream out(stdout);
    const QString service = QStringLiteral("org.botvisor.Botvisor1");
    OrgBotvisorBotvisor1ManagerInterface manager(service, QStringLiteral("/org/botvisor/Botvisor1"),
                                                 QDBusConnection::sessionBus());
    BotvisorPermissionModes modes = manager.permissionModes();
    if (modes.isEmpty())
        die("PermissionModes: " + manager.lastError().message());
    out << "runtimes " << QStringList(modes.keys()).join(",") << "\n";
    QDBusPendingReply<QDBusObjectPath> path = manager.GetBot(QString::fromLocal8Bit(argv[1]));
    path.waitForFinished();
    if (path.isError())
        die("GetBot: " + path.error().message());
    out << "path " << path.value().path() << "\n";

    OrgBotvisorBotvisor1BotInterface bot(service, path.value().path(),
                                         QDBusConnection::sessionBus());
    out << "state " << bot.state() << "\n";
    QDBusPendingReply<BotvisorChatItemList> items = bot.GetChat(0, 0);
    items.waitForFinished();
    if (items.isError())
        die("GetChat: " + items.error().message());
    out << "items " << items.value().size() << "\n";
    out << "pending " << bot.pendingPermissions().size() << "\n";

    QDBusPendingReply<QDBusUnixFileDescriptor> fd =
        bot.OpenChatItem(QByteArray(argv[2]).toULongLong(), QVariantMap());
    fd.waitForFinished();
    if (fd.isError())
        die("OpenChatItem: " + fd.error().message());
    QFile file;
    if (!file.open(fd.value().fileDescriptor(), QIODevice::ReadOnly))
        die("the descriptor: " + file.errorString());
    out << "payload " << QString::fromUtf8(file.readAll()) << "\n";
    return 0;
}
