//! `set_state`: merge-patches the application state (RFC 7386). The state
//! lives in the session log as `app_state` entries, so it is part of the
//! branch: rewinding the conversation rewinds the state with it.
//!
//! Idempotent: applying the same merge patch twice gives the same state, so
//! a call interrupted by a crash is safely re-run.

use cairn::{AppStateChange, EffectClass, EntryBody, ToolOutput};
use serde_json::{Value, json};

use super::{Tool, ToolCall};

/// The `set_state` tool.
#[derive(Debug, Clone, Copy)]
pub struct SetState;

impl Tool for SetState {
    fn name(&self) -> &str {
        "set_state"
    }
    fn description(&self) -> &str {
        "Update the application state with a JSON merge patch (RFC 7386): keys in `patch` are set, keys set to null are removed. The state is saved in the session, and rewinding the session restores the state of that point."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"patch": {"type": "object", "description": "A JSON merge patch."}},
            "required": ["patch"],
            "additionalProperties": false
        })
    }
    fn effect(&self) -> EffectClass {
        EffectClass::Idempotent
    }
    fn summary(&self, args: &Value) -> String {
        let patch = args.get("patch").map(Value::to_string).unwrap_or_default();
        format!("set_state: {}", cairn_view::term::excerpt(&patch, 100))
    }
    fn run(&self, call: &ToolCall<'_>) -> ToolOutput {
        let patch = call.arguments.get("patch").cloned().unwrap_or(Value::Null);
        match call
            .session
            .append(EntryBody::AppState(AppStateChange::Patch(patch)))
        {
            Ok(_) => ToolOutput::text(format!(
                "state is now {}",
                call.session.context().app_state()
            )),
            Err(e) => ToolOutput::error(format!(
                "the state could not be saved: {}",
                cairn::with_causes(&e)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cairn::testkit::vfs::{Faults, HookVfs};
    use cairn::{FileBackend, NewSession, Store};

    use super::*;
    use crate::interrupt::Interrupt;
    use crate::tools::ToolEnv;

    #[test]
    fn regression_a_failed_save_of_the_state_lost_the_os_error() {
        let dir = tempfile::tempdir().unwrap();
        let vfs = HookVfs::new(Faults::new());
        let backend = FileBackend::with_vfs(dir.path().join("sessions"), vfs.clone());
        let store = Store::with_backend(Arc::new(backend));
        let session = store.create(NewSession::default()).unwrap();
        vfs.hook().set_failing(true);
        let env = ToolEnv::new(dir.path(), dir.path().join("blobs"));
        let interrupt = Interrupt::new();
        let args = json!({"patch": {"a": 1}});
        let call = ToolCall {
            call_id: "c",
            arguments: &args,
            key: "k",
            session: &session,
            env: &env,
            interrupt: &interrupt,
        };
        let out = SetState.run(&call);
        let text = crate::provider::result_text(&out.content);
        assert!(out.is_error, "{text}");
        let os_error = std::io::Error::from_raw_os_error(5).to_string();
        assert!(text.contains(&os_error), "{text}");
    }
}
