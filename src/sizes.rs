//! The sizes botvisor keeps to, so that no reply and no signal exceeds what the bus accepts
//! (design rule 15).
//!
//! The D-Bus specification caps a message at 128 MiB and an array inside it at 64 MiB; libdbus
//! and dbus-daemon enforce both whatever the bus configuration says (the stock session bus
//! configuration raises `max_message_size` to 1,000,000,000 bytes, but not those caps). A
//! message over them makes dbus-daemon drop the sender's connection, which for botvisord means
//! leaving the bus. So every value that grows with what an agent prints or a client sends is
//! bounded here, far below those caps; `docs/dbus-api.md` documents each bound.

/// A chat item payload (JSON text, in bytes) up to this size is served whole, in `GetChat` and
/// in `ChatItemAdded`; a larger one is served as a preview ([`crate::preview`]) and read whole
/// with `ReadChatItem` or `OpenChatItem`. The same bound holds for `PermissionRequested`'s
/// input and for one `TextDelta`'s text. 1 MiB.
pub const MAX_ITEM_BYTES: usize = 1 << 20;

/// One `GetChat` reply carries items while their total size stays within this budget, and
/// always at least one item, so a client that pages with the last seq it got always
/// progresses. 4 MiB.
pub const MAX_PAGE_BYTES: usize = 4 << 20;

/// The most items one `GetChat` returns; a `limit` of 0 means this many.
pub const MAX_PAGE_ITEMS: u32 = 10_000;

/// The most rows one `ListSpend` returns; a `limit` of 0 means this many. A row (a bot's spend
/// on one day) takes under 1 KiB (a name is at most 200 characters), so a reply stays under
/// [`MAX_PAGE_BYTES`], which bounds it too.
pub const MAX_SPEND_ROWS: u32 = 4096;

/// The most bytes one `ReadChatItem` returns; a `length` of 0 means this many. 4 MiB.
pub const MAX_READ_BYTES: u32 = 4 << 20;

/// The longest message `Send` takes, in bytes of UTF-8. 1 MiB.
pub const MAX_SEND_BYTES: usize = 1 << 20;

/// Why a message of `len` bytes (more than [`MAX_SEND_BYTES`]) is refused: the words of
/// `Send`'s `InvalidArgument`, which botvisorctl also says before it sends.
pub fn send_too_long(len: usize) -> String {
    format!(
        "the message is {len} bytes; Send takes at most {MAX_SEND_BYTES} bytes (1 MiB). Send a \
         shorter message, or write the text to a file in the bot's working directory and send \
         its path"
    )
}

/// Bound of the per-bot properties that grow with the agent's output, in bytes: `PartialText`
/// serves at most this much of the end of the text being written, and an input in
/// `PendingPermissions` longer than this is served as a preview. They are small because
/// `GetManagedObjects` carries them for every bot in one reply. 16 KiB.
pub const MAX_PROPERTY_BYTES: usize = 16 << 10;

/// A preview's `preview` member, written as a JSON string, takes at most this many bytes.
/// 16 KiB.
pub const PREVIEW_BYTES: usize = 16 << 10;

/// A member of the original object is kept in its preview when it takes at most this many
/// bytes written as JSON (`"name":value`). 1 KiB.
pub const KEPT_MEMBER_BYTES: usize = 1 << 10;

/// The members kept in a preview take at most this many bytes of JSON in all. 16 KiB.
pub const KEPT_BYTES: usize = 16 << 10;

/// No preview object is longer than this, whatever it previews: the preview, the kept members
/// and the marker members. 34 KiB.
pub const MAX_PREVIEW_OBJECT_BYTES: usize = PREVIEW_BYTES + KEPT_BYTES + 2 * KEPT_MEMBER_BYTES;

/// Why `text` cannot go as a D-Bus string, if it cannot: it holds a NUL byte (U+0000), which
/// the D-Bus wire format cannot carry (asked to send one, a client library fails and drops its
/// connection to the bus, so a client refuses it first, in words).
pub fn unsendable(text: &str) -> Option<String> {
    text.contains('\0').then(|| {
        "the message holds a NUL byte (U+0000), which D-Bus cannot carry; remove it and send \
         again"
            .to_owned()
    })
}
