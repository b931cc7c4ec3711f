//! A CLI that exits unasked: the shell hands the exit to the core
//! ([`crate::supervisor::core::Input::Exited`]), cleans up what is left of the process tree when
//! asked, and says when it is done ([`crate::supervisor::core::Input::CleanedUp`]).

use super::Actor;
use crate::process::ExitInfo;
use crate::supervisor::core::Input;

impl Actor {
    /// The process exited without being asked to.
    pub(super) async fn on_exit(&mut self, info: ExitInfo) {
        let Some(proc) = self.proc.take() else {
            return;
        };
        if crate::systemd::life::keeper().is_some() {
            crate::process::spawn::unstore_descriptors(&self.id);
        }
        let root_pid = proc.handle.pid;
        self.handle(Input::Exited {
            status: info,
            stderr: proc.handle.stderr_text(),
            lived: proc.handle.started.elapsed(),
        });
        if let Some(why) = self.clean_up_asked.take() {
            self.clean_up_after_exit(root_pid, why).await;
            self.handle(Input::CleanedUp);
        }
    }
}
