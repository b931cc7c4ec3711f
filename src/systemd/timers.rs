//! The schedules' timers in the systemd user manager (issue 49): once
//! [`crate::schedule::units::write_all`] has made the unit files say what the database says,
//! the manager reads them again, each timer written is enabled (wanted by `timers.target`, so
//! it runs from the next login on without botvisord) and (re)started, and each timer removed is
//! stopped and disabled. Every call has a bound ([`MANAGER_CALL`]): a manager that does not
//! answer is said in words, never waited for.

use std::time::Duration;

use super::api::ManagerProxy;
use crate::schedule::units::Written;

/// How long one call to the user manager may take: a reload of a few hundred units takes well
/// under a second; past this the manager is taken as not answering.
pub const MANAGER_CALL: Duration = Duration::from_secs(15);

/// The user manager that runs the schedules' timers.
#[derive(Debug, Clone)]
pub struct Timers {
    conn: zbus::Connection,
}

async fn bounded<T>(what: &str, call: impl Future<Output = zbus::Result<T>>) -> Result<T, String> {
    match tokio::time::timeout(MANAGER_CALL, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("the user manager refused {what}: {e}")),
        Err(_) => Err(format!(
            "the user manager did not answer {what} within {} s",
            MANAGER_CALL.as_secs()
        )),
    }
}

impl Timers {
    /// The systemd user manager on the session bus. Errors, in words: no session bus, or no
    /// user manager on it (botvisord outside a systemd user session).
    pub async fn find() -> Result<Timers, String> {
        let conn = tokio::time::timeout(MANAGER_CALL, zbus::Connection::session())
            .await
            .map_err(|_| "the session bus did not answer".to_owned())?
            .map_err(|e| format!("no session bus to reach the user manager on: {e}"))?;
        let manager = ManagerProxy::new(&conn)
            .await
            .map_err(|e| format!("the user manager: {e}"))?;
        bounded("GetUnit timers.target", manager.get_unit("timers.target"))
            .await
            .map_err(|e| format!("no systemd user manager runs the timers here ({e})"))?;
        Ok(Timers { conn })
    }

    /// Makes the manager run what `written` says: a reload when a file changed, then each
    /// timer written enabled and restarted, each removed stopped and disabled. Errors: the
    /// first call refused or not answered, in words (the files stay as written: the next
    /// reconcile tries again).
    pub async fn apply(&self, written: &Written) -> Result<(), String> {
        if !written.changed {
            return Ok(());
        }
        let manager = ManagerProxy::new(&self.conn)
            .await
            .map_err(|e| format!("the user manager: {e}"))?;
        for timer in &written.removed {
            // A timer whose file is gone: stopped (it may be loaded still), its links removed.
            let _ = bounded("StopUnit", manager.stop_unit(timer, "replace")).await;
            let _ = bounded(
                "DisableUnitFiles",
                manager.disable_unit_files(&[timer], false),
            )
            .await;
        }
        bounded("Reload", manager.reload()).await?;
        for timer in &written.removed {
            // A timer whose files went while it was stopping can be left `failed` (a hostile
            // trial saw `not-found failed` timers in `systemctl --user --failed`): forgotten.
            let service = timer.replace(".timer", ".service");
            for unit in [timer.as_str(), service.as_str()] {
                let _ = bounded("ResetFailedUnit", manager.reset_failed_unit(unit)).await;
            }
        }
        for timer in &written.timers {
            bounded(
                "EnableUnitFiles",
                manager.enable_unit_files(&[timer], false, true),
            )
            .await?;
            bounded("RestartUnit", manager.restart_unit(timer, "replace")).await?;
        }
        Ok(())
    }

    /// Starts every timer in `names` that is not active (a timer stopped by hand, or one whose
    /// unit file was put back): `StartUnit` on an active unit changes nothing.
    pub async fn start_all(&self, names: &[String]) -> Result<(), String> {
        let manager = ManagerProxy::new(&self.conn)
            .await
            .map_err(|e| format!("the user manager: {e}"))?;
        for timer in names {
            bounded("StartUnit", manager.start_unit(timer, "replace")).await?;
        }
        Ok(())
    }
}
