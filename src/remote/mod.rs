//! Other machines' botvisords, reached over their own buses (docs/remote.md): D-Bus addresses
//! and the ssh address of a host ([`address`]), the hosts a user names ([`hosts`], issue 51),
//! and the program that carries such a link ([`link`]). Clients' code: botvisord itself never
//! reaches another machine.

pub mod address;
pub mod hosts;
pub mod link;
