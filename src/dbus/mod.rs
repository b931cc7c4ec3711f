//! The D-Bus face of botvisor: API version 1, `org.botvisor.Botvisor1` on the session bus.
//!
//! [`manager`] serves `/org/botvisor/Botvisor1` with [`objects`] (the ObjectManager), [`bot`]
//! one object per bot below it. Every method call and property read passes the caller check
//! ([`guard`], [`caller`]; who a caller is comes from the bus through [`lookup`], and [`clients`]
//! follows connections joining and leaving) and then validates its arguments before anything changes; errors are
//! [`error::Error`]. [`publisher`] turns committed changes into signals, for the [`audience`]
//! design rule 14 allows. [`bounds`] keeps every reply and signal within what the bus accepts.
//! [`client`] holds the proxies `botvisorctl` and the tests use.

pub mod audience;
pub mod bot;
pub mod bounds;
pub mod caller;
pub mod client;
pub mod clients;
pub mod ctx;
pub mod descriptors;
pub mod error;
pub mod guard;
pub mod item_fd;
pub mod lookup;
pub mod manager;
pub mod objects;
pub mod options;
pub mod paths;
pub mod publisher;
pub mod replies;
pub mod schedules;
pub mod service;

/// The well-known bus name.
pub const BUS_NAME: &str = "org.botvisor.Botvisor1";
/// The root object path.
pub const ROOT_PATH: &str = "/org/botvisor/Botvisor1";
/// The Manager interface.
pub const MANAGER_INTERFACE: &str = "org.botvisor.Botvisor1.Manager";
/// The Bot interface.
pub const BOT_INTERFACE: &str = "org.botvisor.Botvisor1.Bot";
/// The API version the Manager's `Version` property reports.
pub const API_VERSION: &str = "1";
