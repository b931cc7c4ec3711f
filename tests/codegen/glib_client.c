/* A client made from dbus/org.botvisor.Botvisor1.xml by gdbus-codegen, as a GNOME developer
 * starts one (tests/codegen.rs builds and runs it against botvisord). Usage:
 *   glib_client BOT_ID SEQ
 * Prints the bot's path, its State, the number of chat items, then chat item SEQ's payload read
 * through OpenChatItem's descriptor. */
#include <gio/gio.h>
#include <gio/gunixfdlist.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "botvisor-glib.h"

static void die(const char *what, GError *error)
{
    fprintf(stderr, "%s: %s\n", what, error ? error->message : "failed");
    exit(1);
}

int main(int argc, char **argv)
{
    GError *error = NULL;
    if (argc != 3)
        die("usage: glib_client BOT_ID SEQ", NULL);
    BotvisorManager *manager = botvisor_manager_proxy_new_for_bus_sync(
        G_BUS_TYPE_SESSION, G_DBUS_PROXY_FLAGS_NONE, "org.botvisor.Botvisor1",
        "/org/botvisor/Botvisor1", NULL, &error);
    if (!manager)
        die("Manager", error);
    gchar *path = NULL;
    if (!botvisor_manager_call_get_bot_sync(manager, argv[1], &path, NULL, &error))
        die("GetBot", error);
    printf("path %s\n", path);

    BotvisorBot *bot = botvisor_bot_proxy_new_for_bus_sync(
        G_BUS_TYPE_SESSION, G_DBUS_PROXY_FLAGS_NONE, "org.botvisor.Botvisor1", path, NULL,
        &error);
    if (!bot)
        die("Bot", error);
    printf("state %s\n", botvisor_bot_get_state(bot));

    GVariant *items = NULL;
    if (!botvisor_bot_call_get_chat_sync(bot, 0, 0, &items, NULL, &error))
        die("GetChat", error);
    printf("items %" G_GSIZE_FORMAT "\n", g_variant_n_children(items));
    g_variant_unref(items);

    GVariantBuilder options;
    g_variant_builder_init(&options, G_VARIANT_TYPE_VARDICT);
    GVariant *handle = NULL;
    GUnixFDList *fds = NULL;
    if (!botvisor_bot_call_open_chat_item_sync(bot, g_ascii_strtoull(argv[2], NULL, 10),
                                               g_variant_builder_end(&options), NULL, &handle,
                                               &fds, NULL, &error))
        die("OpenChatItem", error);
    gint fd = g_unix_fd_list_get(fds, g_variant_get_handle(handle), &error);
    if (fd < 0)
        die("the descriptor", error);
    printf("payload ");
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        fwrite(buf, 1, (size_t)n, stdout);
    printf("\n");
    close(fd);
    g_variant_unref(handle);
    g_object_unref(fds);
    g_free(path);
    g_object_unref(bot);
    g_object_unref(manager);
    return 0;
}
