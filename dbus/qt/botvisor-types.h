// The C++ types of botvisor's D-Bus signatures that QtDBus does not know, for the code that
// qdbusxml2cpp makes from dbus/org.botvisor.Botvisor1.xml (whose org.qtproject.QtDBus.QtTypeName
// annotations name them):
//
//     qdbusxml2cpp -i botvisor-types.h -p botvisor_proxy dbus/org.botvisor.Botvisor1.xml
//
// Call botvisorRegisterTypes() once, before the first call or property read.
// tests/codegen.rs builds a client with it and runs it against botvisord.
#ifndef BOTVISOR_TYPES_H
#define BOTVISOR_TYPES_H

#include <QtCore/QList>
#include <QtCore/QMap>
#include <QtCore/QMetaType>
#include <QtCore/QString>
#include <QtCore/QVariantMap>
#include <QtCore/QStringList>
#include <QtDBus/QDBusArgument>
#include <QtDBus/QDBusMetaType>

// One item of GetChat, `(tsss)`: seq, kind, RFC 3339 time, JSON payload.
struct BotvisorChatItem {
    quint64 seq = 0;
    QString kind;
    QString time;
    QString payload;
};
typedef QList<BotvisorChatItem> BotvisorChatItemList;

// One conversation of ListConversations, `(ssxsa{sv})`: runtime, session id, last written
// (Unix s), title, details.
struct BotvisorConversation {
    QString runtime;
    QString sessionId;
    qint64 written = 0;
    QString title;
    QVariantMap details;
};
typedef QList<BotvisorConversation> BotvisorConversationList;

// One row of ListSpend, `(ssssdtt)`: bot id, name, runtime, UTC day (YYYY-MM-DD), US dollars
// (-1: the CLI told no cost), input tokens, output tokens.
struct BotvisorSpend {
    QString botId;
    QString name;
    QString runtime;
    QString day;
    double usd = 0;
    quint64 inputTokens = 0;
    quint64 outputTokens = 0;
};
typedef QList<BotvisorSpend> BotvisorSpendList;

// One entry of the PendingPermissions property, `(sss)`: request id, tool, input JSON.
struct BotvisorPermissionRequest {
    QString requestId;
    QString tool;
    QString input;
};
typedef QList<BotvisorPermissionRequest> BotvisorPermissionRequestList;

// The PermissionModes property, `a{sas}`: the modes each runtime accepts, by runtime name.
typedef QMap<QString, QStringList> BotvisorPermissionModes;

// SetEnvironment's `env`, `a{ss}`: variable names and values.
typedef QMap<QString, QString> BotvisorEnvironment;

// The Schedules property, `aa{sv}`: one dictionary per schedule (id, bot, calendar, prompt,
// when_busy, random_delay_s, paused, next, last_fired).
typedef QList<QVariantMap> BotvisorScheduleList;

// The PlanLimit property, `(ssdt)`: state, kind, utilization (-1: not told), reset (Unix s).
struct BotvisorPlanLimit {
    QString state;
    QString kind;
    double utilization = -1;
    quint64 resetsAt = 0;
};

inline QDBusArgument &operator<<(QDBusArgument &arg, const BotvisorChatItem &item)
{
    arg.beginStructure();
    arg << item.seq << item.kind << item.time << item.payload;
    arg.endStructure();
    return arg;
}

inline const QDBusArgument &operator>>(const QDBusArgument &arg, BotvisorChatItem &item)
{
    arg.beginStructure();
    arg >> item.seq >> item.kind >> item.time >> item.payload;
    arg.endStructure();
    return arg;
}

inline QDBusArgument &operator<<(QDBusArgument &arg, const BotvisorPermissionRequest &request)
{
    arg.beginStructure();
    arg << request.requestId << request.tool << request.input;
    arg.endStructure();
    return arg;
}

inline const QDBusArgument &operator>>(const QDBusArgument &arg,
                                       BotvisorPermissionRequest &request)
{
    arg.beginStructure();
    arg >> request.requestId >> request.tool >> request.input;
    arg.endStructure();
    return arg;
}

inline QDBusArgument &operator<<(QDBusArgument &arg, const BotvisorPlanLimit &limit)
{
    arg.beginStructure();
    arg << limit.state << limit.kind << limit.utilization << limit.resetsAt;
    arg.endStructure();
    return arg;
}

inline const QDBusArgument &operator>>(const QDBusArgument &arg, BotvisorPlanLimit &limit)
{
    arg.beginStructure();
    arg >> limit.state >> limit.kind >> limit.utilization >> limit.resetsAt;
    arg.endStructure();
    return arg;
}

inline QDBusArgument &operator<<(QDBusArgument &arg, const BotvisorConversation &c)
{
    arg.beginStructure();
    arg << c.runtime << c.sessionId << c.written << c.title << c.details;
    arg.endStructure();
    return arg;
}

inline const QDBusArgument &operator>>(const QDBusArgument &arg, BotvisorConversation &c)
{
    arg.beginStructure();
    arg >> c.runtime >> c.sessionId >> c.written >> c.title >> c.details;
    arg.endStructure();
    return arg;
}

inline QDBusArgument &operator<<(QDBusArgument &arg, const BotvisorSpend &s)
{
    arg.beginStructure();
    arg << s.botId << s.name << s.runtime << s.day << s.usd << s.inputTokens << s.outputTokens;
    arg.endStructure();
    return arg;
}

inline const QDBusArgument &operator>>(const QDBusArgument &arg, BotvisorSpend &s)
{
    arg.beginStructure();
    arg >> s.botId >> s.name >> s.runtime >> s.day >> s.usd >> s.inputTokens >> s.outputTokens;
    arg.endStructure();
    return arg;
}

Q_DECLARE_METATYPE(BotvisorConversation)
Q_DECLARE_METATYPE(BotvisorSpend)
Q_DECLARE_METATYPE(BotvisorChatItem)
Q_DECLARE_METATYPE(BotvisorPlanLimit)
Q_DECLARE_METATYPE(BotvisorEnvironment)
Q_DECLARE_METATYPE(BotvisorPermissionRequest)
Q_DECLARE_METATYPE(BotvisorPermissionModes)
Q_DECLARE_METATYPE(BotvisorScheduleList)

// Registers the types above with QtDBus.
inline void botvisorRegisterTypes()
{
    qDBusRegisterMetaType<BotvisorChatItem>();
    qDBusRegisterMetaType<BotvisorChatItemList>();
    qDBusRegisterMetaType<BotvisorConversation>();
    qDBusRegisterMetaType<BotvisorConversationList>();
    qDBusRegisterMetaType<BotvisorSpend>();
    qDBusRegisterMetaType<BotvisorSpendList>();
    qDBusRegisterMetaType<BotvisorPermissionRequest>();
    qDBusRegisterMetaType<BotvisorPermissionRequestList>();
    qDBusRegisterMetaType<BotvisorPermissionModes>();
    qDBusRegisterMetaType<BotvisorEnvironment>();
    qDBusRegisterMetaType<BotvisorScheduleList>();
    qDBusRegisterMetaType<BotvisorPlanLimit>();
}

#endif
