//! The entry points of an import, which may rewind: a rewind (`pool import -F`) opens an
//! older tree only once the whole-pool check finds it clean, read-only, with freshly opened
//! devices (`pool/import.rs`). The check is a consumer of the pool layer, so the import is
//! defined in the pool layer with the verdict handed in, and these wrappers, here above both,
//! hand in the check.

use crate::pool::{ImportOptions, ImportReport, Pool, PoolError, RewindPlan};

use super::check_pool;

impl Pool {
    /// Import the pool named (or with the guid) `target` from `dirs`.
    pub fn import(target: &str, options: ImportOptions) -> Result<(Pool, ImportReport), PoolError> {
        Pool::import_judging(target, options, older_tree_verdict)
    }

    /// What `pool import -F -n` reports: the txg a rewind import would open and the seconds
    /// of changes it would discard, without importing or writing anything.
    pub fn rewind_plan(target: &str, options: ImportOptions) -> Result<RewindPlan, PoolError> {
        Pool::rewind_plan_judging(target, options, older_tree_verdict)
    }
}

/// An older tree may be imported if the whole-pool check (no repair) finds nothing wrong.
fn older_tree_verdict(pool: &Pool) -> Result<Option<String>, PoolError> {
    let report = check_pool(pool, false)?;
    if report.is_clean() {
        return Ok(None);
    }
    Ok(Some(format!(
        "its tree does not check: {} unreadable blocks, {} leaks, {} missing, {} double allocations, {} other errors",
        report.blocks_unreadable.len(),
        report.leaks.len(),
        report.missing.len(),
        report.double_allocations.len(),
        report.errors.len()
    )))
}
