//! File systems made by a receive (`send/receive.rs`): created with an empty object set that
//! the stream fills, flagged inconsistent until the receive takes its snapshot, and destroyed
//! at import if a crash stopped the receive part-way (OpenZFS's DS_FLAG_INCONSISTENT and
//! dsl_destroy_inconsistent).

use super::datasets::parent_of;
use super::{Pool, PoolError};

impl Pool {
    /// Create the dataset `full_name` with an empty object set, not formatted as a file
    /// system, for a full receive to fill (its parent must exist). Durable on return.
    pub fn create_dataset_for_receive(&self, full_name: &str) -> Result<(), PoolError> {
        self.writable()?;
        let core = &self.core;
        let relative = core.relative_name(full_name)?.to_string();
        if relative.is_empty() {
            return Err(PoolError::DatasetExists(full_name.into()));
        }
        let _namespace = core.namespace.lock();
        if core.datasets.read().contains_key(&relative) {
            return Err(PoolError::DatasetExists(full_name.into()));
        }
        if !core.datasets.read().contains_key(parent_of(&relative)) {
            return Err(PoolError::DatasetNotFound(
                core.full_name(parent_of(&relative)),
            ));
        }
        core.create_dataset_in(&relative, &[], false)?;
        drop(_namespace);
        self.sync()?;
        Ok(())
    }

    /// Destroy every file system a receive created and did not finish (still flagged
    /// inconsistent: a crash stopped it); returns their names. Failures are logged.
    pub fn destroy_partial_receives(&self) -> Vec<String> {
        let partial: Vec<String> = self
            .core
            .dataset_list()
            .into_iter()
            .filter(|(_, dataset)| {
                dataset.phys().flags & crate::dataset::phys::DS_FLAG_INCONSISTENT != 0
            })
            .map(|(_, dataset)| dataset.name())
            .collect();
        let mut destroyed = Vec::new();
        for name in partial {
            match self.destroy_dataset(&name, true) {
                Ok(_) => {
                    log::warn!("destroyed {name}: a receive stopped by a crash left it part-way");
                    destroyed.push(name);
                }
                Err(error) => log::error!("cannot destroy the partial receive {name}: {error}"),
            }
        }
        destroyed
    }
}
