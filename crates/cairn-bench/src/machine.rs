//! What the numbers were measured on: CPU, cores, kernel, and the file system
//! and device under the benchmark directory (from `/proc`, Linux only;
//! unknown elsewhere).

use std::path::Path;

use serde::Serialize;

/// The machine and disk a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPU model.
    pub cpu: String,
    /// Cores available to the process.
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// Directory the fixtures and logs were written in.
    pub dir: String,
    /// File system type of that directory.
    pub fs_type: String,
    /// Device (mount source) of that directory.
    pub device: String,
    /// Mount point of that directory.
    pub mount_point: String,
}

impl Machine {
    /// Describes this machine, with `dir` as the benchmark directory.
    pub fn describe(dir: &Path) -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let canon = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        let (mount_point, fs_type, device) = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|s| mount_of(&s, &canon))
            .unwrap_or_else(|| ("unknown".into(), "unknown".into(), "unknown".into()));
        Machine {
            cpu,
            cores,
            kernel,
            dir: canon.display().to_string(),
            fs_type,
            device,
            mount_point,
        }
    }

    /// One line for the table's head.
    pub fn summary(&self) -> String {
        format!(
            "{} cores ({}), Linux {}; {} on {} ({}, mounted at {})",
            self.cores,
            self.cpu,
            self.kernel,
            self.dir,
            self.device,
            self.fs_type,
            self.mount_point
        )
    }
}

/// The longest mount point containing `path`: (mount point, fs type, source).
fn mount_of(mountinfo: &str, path: &Path) -> Option<(String, String, String)> {
    mountinfo
        .lines()
        .filter_map(|l| {
            // id parent major:minor root mount-point options [optional...] - fstype source super-options
            let fields: Vec<&str> = l.split(' ').collect();
            let point = *fields.get(4)?;
            let dash = fields.iter().position(|f| *f == "-")?;
            let fs = *fields.get(dash + 1)?;
            let src = *fields.get(dash + 2)?;
            path.starts_with(point)
                .then(|| (point.to_owned(), fs.to_owned(), src.to_owned()))
        })
        .max_by_key(|(p, _, _)| p.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_mount_point_wins() {
        let info = "22 1 254:0 / / rw - ext4 /dev/vda rw\n\
                    30 22 0:40 / /work/tmp rw shared:1 - tmpfs tmpfs rw\n";
        let (p, fs, src) = mount_of(info, Path::new("/work/tmp/x")).unwrap();
        assert_eq!(
            (p.as_str(), fs.as_str(), src.as_str()),
            ("/work/tmp", "tmpfs", "tmpfs")
        );
        let (p, fs, _) = mount_of(info, Path::new("/work/main")).unwrap();
        assert_eq!((p.as_str(), fs.as_str()), ("/", "ext4"));
    }
}
