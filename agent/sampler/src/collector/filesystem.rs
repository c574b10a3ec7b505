//! Filesystem collector: `statvfs` of the node's root filesystem (`--rootfs`) → the kubelet's
//! `nodefs.available` and `nodefs.inodesFree` eviction signals.
//!
//! As the kubelet computes them: available = f_bavail · f_frsize (space usable by
//! unprivileged users, not f_bfree), capacity = f_blocks · f_frsize, inodes free = f_ffree
//! over f_files. Filesystems without a fixed inode table (btrfs) report f_files = 0: the
//! inode ratio is then absent, not 0.
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Errors of the filesystem collector.
#[derive(Debug, Error)]
pub enum FilesystemError {
    /// `statvfs` failed.
    #[error("statvfs {path}: {source}")]
    Statvfs {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The raw `statvfs` figures the signals are computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsStats {
    /// Fragment size (f_frsize), the unit of the block counts.
    pub fragment_size: u64,
    /// Total blocks (f_blocks).
    pub blocks: u64,
    /// Blocks available to unprivileged users (f_bavail).
    pub blocks_available: u64,
    /// Total inodes (f_files).
    pub files: u64,
    /// Free inodes (f_ffree).
    pub files_free: u64,
}

/// The eviction signals of one filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FsSignals {
    /// Capacity in bytes.
    pub total_bytes: u64,
    /// Available bytes.
    pub available_bytes: u64,
    /// available / capacity; `None` for a zero-sized filesystem.
    pub available_ratio: Option<f64>,
    /// free inodes / inodes; `None` when the filesystem reports no inode count.
    pub inodes_free_ratio: Option<f64>,
}

/// Computes the signals from `statvfs` figures.
pub fn signals(s: &FsStats) -> FsSignals {
    let total = s.blocks.saturating_mul(s.fragment_size);
    let available = s
        .blocks_available
        .saturating_mul(s.fragment_size)
        .min(total);
    FsSignals {
        total_bytes: total,
        available_bytes: available,
        available_ratio: (total > 0).then(|| available as f64 / total as f64),
        inodes_free_ratio: (s.files > 0)
            .then(|| (s.files_free.min(s.files)) as f64 / s.files as f64),
    }
}

/// Calls `statvfs` on the root filesystem path.
#[derive(Debug)]
pub struct FilesystemCollector {
    rootfs: PathBuf,
}

impl FilesystemCollector {
    /// A collector for the filesystem mounted at `rootfs`.
    pub fn new(rootfs: &Path) -> Self {
        FilesystemCollector {
            rootfs: rootfs.to_path_buf(),
        }
    }

    /// Takes one sample; `Ok(None)` when the path does not exist.
    pub fn collect(&mut self) -> Result<Option<FsSignals>, FilesystemError> {
        match rustix::fs::statvfs(&self.rootfs) {
            Ok(v) => Ok(Some(signals(&FsStats {
                fragment_size: v.f_frsize,
                blocks: v.f_blocks,
                blocks_available: v.f_bavail,
                files: v.f_files,
                files_free: v.f_ffree,
            }))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(FilesystemError::Statvfs {
                path: self.rootfs.clone(),
                source: e.into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn kubelet_formulas() {
        let s = signals(&FsStats {
            fragment_size: 4096,
            blocks: 1000,
            blocks_available: 250,
            files: 100,
            files_free: 10,
        });
        assert_eq!(s.total_bytes, 4_096_000);
        assert_eq!(s.available_bytes, 1_024_000);
        assert_eq!(s.available_ratio, Some(0.25));
        assert_eq!(s.inodes_free_ratio, Some(0.1));
        let btrfs = signals(&FsStats {
            fragment_size: 4096,
            blocks: 10,
            blocks_available: 5,
            files: 0,
            files_free: 0,
        });
        assert_eq!(btrfs.inodes_free_ratio, None);
    }

    #[test]
    fn live_root_and_missing_path() {
        let mut c = FilesystemCollector::new(Path::new("/"));
        let s = c.collect().expect("statvfs /").expect("exists");
        assert!(s.total_bytes > 0);
        assert!(s.available_ratio.is_some_and(|r| (0.0..=1.0).contains(&r)));
        let mut missing = FilesystemCollector::new(Path::new("/nonexistent/loadstar"));
        assert!(missing.collect().expect("not an error").is_none());
    }

    proptest! {
        #[test]
        fn ratios_in_unit_interval(f in 0u64..1 << 20, b in any::<u64>(), a in any::<u64>(), fi in any::<u64>(), ff in any::<u64>()) {
            let s = signals(&FsStats { fragment_size: f, blocks: b, blocks_available: a, files: fi, files_free: ff });
            for r in [s.available_ratio, s.inodes_free_ratio].into_iter().flatten() {
                prop_assert!((0.0..=1.0).contains(&r));
            }
        }
    }
}
