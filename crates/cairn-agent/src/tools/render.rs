//! The storyboard's paid tool, `render_panel`, and the local ledger file
//! standing in for a billing API that honours idempotency keys: a charge
//! with a key it has seen returns the first charge's result and costs
//! nothing. `render_panel` is therefore `Idempotent`: after a crash,
//! recovery re-runs it with the same key and the ledger charges once.
//!
//! The ledger is a JSON file replaced atomically (temporary file, fsync,
//! rename, directory fsync) before the charge is reported, as a billing
//! service would commit before answering.

use std::io::Write;
use std::path::{Path, PathBuf};

use cairn::{EffectClass, ToolOutput};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use cairn_workspace::Touches;

use super::{Tool, ToolCall, ToolEnv};

/// The ledger's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerState {
    /// Credits left.
    pub balance: i64,
    /// Every charge, in order.
    pub charges: Vec<Charge>,
}

/// One charge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// The idempotency key it was made with.
    pub key: String,
    /// The panel rendered.
    pub panel: i64,
    /// Credits charged.
    pub credits: i64,
    /// The image produced.
    pub image: String,
}

/// A ledger file.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
}

impl Ledger {
    /// The ledger at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Ledger {
        Ledger { path: path.into() }
    }

    /// Creates (or resets) the ledger with `balance` credits.
    ///
    /// # Errors
    ///
    /// I/O errors.
    pub fn create(path: impl Into<PathBuf>, balance: i64) -> std::io::Result<Ledger> {
        let l = Ledger::at(path);
        l.write(&LedgerState {
            balance,
            charges: Vec::new(),
        })?;
        Ok(l)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads it.
    ///
    /// # Errors
    ///
    /// I/O errors; a file that is not a ledger as [`std::io::ErrorKind::InvalidData`].
    pub fn read(&self) -> std::io::Result<LedgerState> {
        let bytes = std::fs::read(&self.path)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    fn write(&self, state: &LedgerState) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = self
            .path
            .with_extension(format!("tmp{}", std::process::id()));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        std::fs::File::open(dir)?.sync_all()
    }

    /// Charges `credits` for `panel` under `key`: a key seen before returns
    /// its first charge and charges nothing (`false`).
    ///
    /// # Errors
    ///
    /// I/O errors; too few credits as [`std::io::ErrorKind::Other`].
    pub fn charge(
        &self,
        key: &str,
        panel: i64,
        credits: i64,
    ) -> std::io::Result<(Charge, bool, i64)> {
        let mut state = self.read()?;
        if let Some(c) = state.charges.iter().find(|c| c.key == key) {
            return Ok((c.clone(), false, state.balance));
        }
        if state.balance < credits {
            return Err(std::io::Error::other(format!(
                "not enough credits: {} left, {credits} needed",
                state.balance
            )));
        }
        let charge = Charge {
            key: key.to_owned(),
            panel,
            credits,
            image: panel_image(panel),
        };
        state.balance -= credits;
        state.charges.push(charge.clone());
        self.write(&state)?;
        Ok((charge, true, state.balance))
    }
}

/// `render_panel`: renders a storyboard panel for a fee.
#[derive(Debug, Clone)]
pub struct RenderPanel {
    ledger: Ledger,
    cost: i64,
    out_dir: PathBuf,
}

impl RenderPanel {
    /// A renderer charging `cost` credits per panel to `ledger`, writing
    /// images into `out_dir`.
    pub fn new(ledger: Ledger, cost: i64, out_dir: impl Into<PathBuf>) -> RenderPanel {
        RenderPanel {
            ledger,
            cost,
            out_dir: out_dir.into(),
        }
    }
}

impl Tool for RenderPanel {
    fn name(&self) -> &str {
        "render_panel"
    }
    fn description(&self) -> &str {
        "Render a storyboard panel as an image. Costs credits; the billing service honours idempotency keys."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "panel": {"type": "integer", "minimum": 1},
                "scene": {"type": "string", "minLength": 1}
            },
            "required": ["panel", "scene"],
            "additionalProperties": false
        })
    }
    fn effect(&self) -> EffectClass {
        EffectClass::Idempotent
    }
    fn summary(&self, args: &Value) -> String {
        let panel = args.get("panel").and_then(Value::as_i64).unwrap_or(0);
        let scene = args.get("scene").and_then(Value::as_str).unwrap_or("");
        format!(
            "render_panel: panel {panel}, {}",
            cairn_view::term::excerpt(scene, 80)
        )
    }
    fn touches(&self, args: &Value, _env: &ToolEnv) -> Option<Touches> {
        let panel = args.get("panel").and_then(Value::as_i64)?;
        let image = self.out_dir.join(panel_image(panel));
        Some(Touches::Files(vec![image.to_string_lossy().into_owned()]))
    }
    fn run(&self, call: &ToolCall<'_>) -> ToolOutput {
        let panel = call.int("panel").unwrap_or(0);
        let scene = call.str("scene").unwrap_or_default();
        let (charge, new, balance) = match self.ledger.charge(call.key, panel, self.cost) {
            Ok(x) => x,
            Err(e) => return ToolOutput::error(format!("billing refused the render: {e}")),
        };
        let svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"480\" height=\"270\"><rect width=\"480\" height=\"270\" fill=\"#fdf6e3\" stroke=\"#333\"/><text x=\"16\" y=\"40\" font-size=\"20\">Panel {panel}</text><text x=\"16\" y=\"80\" font-size=\"14\">{}</text></svg>\n",
            xml_escape(scene)
        );
        let _ = std::fs::create_dir_all(&self.out_dir)
            .and_then(|()| std::fs::write(self.out_dir.join(&charge.image), svg));
        if new {
            ToolOutput::text(format!(
                "Rendered {} ({} credits charged; balance {balance}).",
                charge.image, charge.credits
            ))
        } else {
            ToolOutput::text(format!(
                "{} was already rendered and paid for under this idempotency key: no new charge (balance {balance}).",
                charge.image
            ))
        }
    }
}

/// The file name of panel `panel`'s image.
fn panel_image(panel: i64) -> String {
    format!("panel-{panel}.svg")
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_charged_once() {
        let dir = tempfile::tempdir().unwrap();
        let l = Ledger::create(dir.path().join("ledger.json"), 30).unwrap();
        let (c, new, bal) = l.charge("k1", 1, 10).unwrap();
        assert!(new);
        assert_eq!((c.panel, bal), (1, 20));
        let (_, new, bal) = l.charge("k1", 1, 10).unwrap();
        assert!(!new);
        assert_eq!(bal, 20);
        l.charge("k2", 2, 10).unwrap();
        l.charge("k3", 3, 10).unwrap();
        assert!(l.charge("k4", 4, 10).is_err());
        assert_eq!(l.read().unwrap().charges.len(), 3);
    }
}
