//! A chat item's whole payload as a file descriptor (`OpenChatItem`): a sealed memory file, the
//! D-Bus way of passing big data on one machine.

use std::os::fd::OwnedFd;

use crate::sizes::MAX_READ_BYTES;
use crate::store::{self, Store};

/// Why no descriptor was made.
#[derive(Debug, thiserror::Error)]
pub enum FdError {
    /// The bot has no such item.
    #[error("no such chat item")]
    NoItem,
    /// The database failed.
    #[error("{0}")]
    Store(#[from] store::StoreError),
    /// The memory file could not be made or sealed.
    #[error("cannot make the memory file: {0}")]
    Io(#[from] std::io::Error),
}

/// A memory file holding item `seq`'s whole payload, positioned at its start and sealed: it can
/// be neither written, nor resized, nor unsealed. Filled in pieces of at most
/// [`MAX_READ_BYTES`], so the store is never held for long and the payload is never in memory
/// twice.
#[cfg(target_os = "linux")]
pub fn sealed_copy(store: &Store, bot_id: &str, seq: u64) -> Result<OwnedFd, FdError> {
    use rustix::fs::{MemfdFlags, SealFlags};
    use std::io::{Seek, Write};
    let fd = rustix::fs::memfd_create(
        "botvisor-chat-item",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )
    .map_err(std::io::Error::from)?;
    let mut file = std::fs::File::from(fd);
    let mut offset = 0u64;
    loop {
        let (bytes, size) = store
            .read(|c| store::chat::read(c, bot_id, seq, offset, MAX_READ_BYTES as usize))?
            .ok_or(FdError::NoItem)?;
        file.write_all(&bytes)?;
        offset += bytes.len() as u64;
        if bytes.is_empty() || offset >= size {
            break;
        }
    }
    rustix::fs::fcntl_add_seals(
        &file,
        SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL,
    )
    .map_err(std::io::Error::from)?;
    file.rewind()?;
    Ok(file.into())
}

/// Elsewhere there is no memory file to seal: `ReadChatItem` reads the item in ranges.
#[cfg(not(target_os = "linux"))]
pub fn sealed_copy(_store: &Store, _bot_id: &str, _seq: u64) -> Result<OwnedFd, FdError> {
    Err(FdError::Io(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "OpenChatItem needs Linux memory files here; read the item with ReadChatItem",
    )))
}
