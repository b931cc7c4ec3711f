//! How the command lines botvisorctl prints (`botvisorctl watch demo`, `botvisorctl answer …`)
//! name the bus the user chose: with the same `--host HOST` or `--address 'ADDRESS'` (one shell
//! word each), so that pasting a hint on the laptop acts on the machine that printed it, not on
//! the laptop's own bus. A bus chosen by `DBUS_SESSION_BUS_ADDRESS` adds nothing: the shell that
//! pastes the hint has it too.
//!
//! Also what a dropped connection is called: the link (`--host`, a `unixexec:` program) or the
//! bus.

use std::sync::OnceLock;

use super::connect::Bus;
use super::shell_word;

/// The bus choice of this run, set once in `main` before any command runs.
static CHOICE: OnceLock<Choice> = OnceLock::new();

/// The command and the link of this run.
#[derive(Debug)]
struct Choice {
    /// `botvisorctl`, with `--host HOST` or `--address 'ADDRESS'` when the user gave one.
    ctl: String,
    /// The link in words, for a connection that drops: `the ssh link to me@box`.
    link: String,
}

/// Records the bus choice: `host` and `address` as the user typed them, `bus` as chosen.
pub fn set(host: Option<&str>, address: Option<&str>, bus: &Bus) {
    let _ = CHOICE.set(choice(host, address, bus));
}

fn choice(host: Option<&str>, address: Option<&str>, bus: &Bus) -> Choice {
    let ctl = match (host, address) {
        (Some(h), _) => format!("botvisorctl --host {}", shell_word(h)),
        (None, Some(a)) => format!("botvisorctl --address {}", shell_word(a)),
        (None, None) => "botvisorctl".to_owned(),
    };
    let link = match bus {
        Bus::Session => "the connection to the session bus".to_owned(),
        Bus::Host(h, _) => format!(
            "the connection to the bus of {} (ssh and systemd-stdio-bridge)",
            super::show::safe(h)
        ),
        Bus::Address(a, from) => match a.transport() {
            zbus::address::transport::Transport::Unixexec(x) => format!(
                "the connection to the bus through {} (the program of the unixexec: address \
                 from {from})",
                super::show::safe(&x.path().display().to_string())
            ),
            _ => format!(
                "the connection to the bus at {} (from {from})",
                super::show::safe(&a.to_string())
            ),
        },
    };
    Choice { ctl, link }
}

/// `botvisorctl` aimed at `m`, one host of several (issue 51): `--host NAME` for a configured or
/// ssh host and for `local`, `--address 'ADDRESS'` for an address given as it is.
pub fn ctl_for(m: &super::fleet::Member) -> String {
    if m.by_address {
        format!("botvisorctl --address {}", shell_word(&m.name))
    } else {
        format!("botvisorctl --host {}", shell_word(&m.name))
    }
}

/// `botvisorctl` as the hints of this run write it: with the user's `--host` or `--address`.
pub fn ctl() -> &'static str {
    CHOICE.get().map_or("botvisorctl", |c| c.ctl.as_str())
}

/// The connection of this run in words (`the connection to the bus of me@box (ssh and
/// systemd-stdio-bridge)`).
pub fn link() -> &'static str {
    CHOICE
        .get()
        .map_or("the connection to the bus", |c| c.link.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_carry_the_bus_the_user_chose() {
        let no_env = |_: &str| None;
        let bus = Bus::choose(None, Some("me@box"), no_env).unwrap();
        let c = choice(Some("me@box"), None, &bus);
        assert_eq!(c.ctl, "botvisorctl --host me@box");
        assert!(c.link.contains("of me@box (ssh"), "{}", c.link);
        let a = "unixexec:path=ssh,argv1=-xT,argv2=me@box,argv3=systemd-stdio-bridge";
        let bus = Bus::choose(Some(a), None, no_env).unwrap();
        let c = choice(None, Some(a), &bus);
        assert_eq!(
            c.ctl,
            format!("botvisorctl --address {a}"),
            "a plain shell word"
        );
        let c = choice(None, Some("unix:path=/run/my bus"), &bus);
        assert_eq!(c.ctl, "botvisorctl --address 'unix:path=/run/my bus'");
        assert!(c.link.contains("through ssh (the program"), "{}", c.link);
        let c = choice(None, None, &Bus::Session);
        assert_eq!(c.ctl, "botvisorctl");
    }
}
