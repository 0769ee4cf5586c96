//! Tunables: every knob the engine has, named as in OpenZFS's zfs(4) where one exists, with its
//! default, in one place.
//!
//! A daemon reads overrides from the environment as `TARN_TUNABLE_<name>=value` (for example
//! `TARN_TUNABLE_txg_timeout=1`). An embedding program builds a [`Tunables`] value directly.
//! [`Tunables::tiny`] is the tiny test configuration: small metaslabs, small indirect blocks and
//! small records, so that indirection, condensing and multi-level trees happen within
//! milliseconds in tests.

use std::time::Duration;

macro_rules! tunables {
    ($( $(#[doc = $doc:expr])* $name:ident : $ty:ty = $default:expr ),* $(,)?) => {
        /// The engine's tunables. See the module documentation.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Tunables {
            $( $(#[doc = $doc])* pub $name: $ty, )*
        }

        impl Default for Tunables {
            fn default() -> Self {
                Tunables { $( $name: $default, )* }
            }
        }

        impl Tunables {
            /// Every tunable as (name, current value, documentation), for `tarn stat tunables`
            /// and the documentation table.
            pub fn describe(&self) -> Vec<(&'static str, String, &'static str)> {
                vec![ $( (stringify!($name), format!("{}", self.$name), concat!($($doc, " "),*)), )* ]
            }

            /// Set one tunable by name from its textual value, keeping the whole set valid.
            pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
                let previous = self.clone();
                self.set_unchecked(name, value)?;
                if let Err(error) = self.validate() {
                    *self = previous;
                    return Err(error);
                }
                Ok(())
            }

            /// Set one tunable without checking the set (for applying several that are only
            /// valid together; call [`Tunables::validate`] after the last).
            fn set_unchecked(&mut self, name: &str, value: &str) -> Result<(), String> {
                match name {
                    $( stringify!($name) => {
                        let parsed = value.trim().parse::<$ty>().map_err(|error| {
                            format!("tunable {name}: cannot parse {value:?}: {error}")
                        })?;
                        self.$name = parsed;
                        Ok(())
                    } )*
                    _ => Err(format!("unknown tunable {name:?}")),
                }
            }
        }
    };
}

tunables! {
    /// Seconds between txg syncs when nothing else triggers one (zfs_txg_timeout).
    txg_timeout: u64 = 5,
    /// Txgs whose statistics the pool keeps for `tarn stat txgs` (zfs_txg_history); 0 keeps
    /// none.
    txg_history: u64 = 100,
    /// Maximum dirty bytes in flight before writers block (zfs_dirty_data_max).
    dirty_data_max: u64 = 1 << 30,
    /// Percent of dirty_data_max at which a txg sync starts (zfs_dirty_data_sync_percent).
    dirty_data_sync_percent: u64 = 20,
    /// Percent of dirty_data_max at which writers start to be delayed (zfs_delay_min_dirty_percent).
    delay_min_dirty_percent: u64 = 60,
    /// Scale of the write-throttle delay curve in nanoseconds (zfs_delay_scale).
    delay_scale: u64 = 500_000,
    /// Longest single write-throttle delay in nanoseconds (zfs_delay_max_ns).
    delay_max_ns: u64 = 100_000_000,
    /// Target number of metaslabs per top-level vdev (zfs_vdev_default_ms_count).
    vdev_default_ms_count: u64 = 200,
    /// Minimum number of metaslabs per top-level vdev (zfs_vdev_min_ms_count).
    vdev_min_ms_count: u64 = 16,
    /// Cap on metaslabs per top-level vdev (zfs_vdev_ms_count_limit).
    vdev_ms_count_limit: u64 = 131_072,
    /// Default metaslab shift, 512 MiB (zfs_vdev_default_ms_shift).
    vdev_default_ms_shift: u32 = 29,
    /// Smallest metaslab shift allowed (SPA_MAXBLOCKSHIFT in OpenZFS; lowered by the tiny test configuration).
    vdev_min_ms_shift: u32 = 24,
    /// Largest metaslab shift, 16 GiB (zfs_vdev_max_ms_shift).
    vdev_max_ms_shift: u32 = 34,
    /// Space-map data block size for metaslab maps (zfs_metaslab_sm_blksz_no_log).
    metaslab_sm_blksz: u32 = 16 << 10,
    /// Space-map data block size for metaslab maps of a pool with the log space map, whose maps
    /// are appended only when a metaslab is flushed (zfs_metaslab_sm_blksz_with_log).
    metaslab_sm_blksz_with_log: u32 = 128 << 10,
    /// Data block size of the log space maps (zfs_log_sm_blksz, a constant in OpenZFS).
    log_sm_blksz: u32 = 128 << 10,
    /// Log blocks allowed per dirty metaslab, in percent, for the log's block limit
    /// (zfs_unflushed_log_block_pct).
    unflushed_log_block_pct: u64 = 400,
    /// Least block limit of the log space maps (zfs_unflushed_log_block_min).
    unflushed_log_block_min: u64 = 1000,
    /// Greatest block limit of the log space maps (zfs_unflushed_log_block_max).
    unflushed_log_block_max: u64 = 131_072,
    /// Txgs a metaslab may stay unflushed, which also bounds the logs replayed at import
    /// (zfs_unflushed_log_txg_max).
    unflushed_log_txg_max: u64 = 1000,
    /// Bytes of unflushed changes in memory above which metaslabs are flushed regardless of
    /// the estimate (zfs_unflushed_max_mem_amt; OpenZFS also caps it at 0.1% of RAM).
    unflushed_max_mem_amt: u64 = 1 << 30,
    /// Rows of the log summary the flush estimate walks (zfs_max_logsm_summary_length).
    max_logsm_summary_length: u64 = 10,
    /// Least metaslabs flushed per txg while any is dirty (zfs_min_metaslabs_to_flush).
    min_metaslabs_to_flush: u64 = 1,
    /// Logs whose block counts make the incoming-rate estimate (zfs_max_log_walking).
    max_log_walking: u64 = 5,
    /// Condense a space map when it is this percent of its optimal size (zfs_metaslab_condense_pct).
    metaslab_condense_pct: u64 = 200,
    /// Below this largest free segment, dynamic fit goes straight to best fit (metaslab_df_alloc_threshold).
    metaslab_df_alloc_threshold: u64 = 128 << 10,
    /// Below this percent free, dynamic fit goes straight to best fit (metaslab_df_free_pct).
    metaslab_df_free_pct: u64 = 4,
    /// Bytes past the first examined segment after which first fit gives up (metaslab_df_max_search).
    metaslab_df_max_search: u64 = 16 << 20,
    /// Bytes written to one top-level vdev before rotating to the next (metaslab_aliquot).
    metaslab_aliquot: u64 = 2 << 20,
    /// Least space held back from writers, in bytes, unless that is more than half the pool
    /// (spa_min_slop); see `SpaceTotals::slop`.
    spa_min_slop: u64 = 128 << 20,
    /// Blocks of at least this many allocated bytes are written as gangs even when they fit
    /// (metaslab_force_ganging; the default, above the largest block, never forces).
    metaslab_force_ganging: u64 = (1 << 20) + 1,
    /// Percent of the blocks `metaslab_force_ganging` makes eligible that are ganged
    /// (metaslab_force_ganging_pct).
    metaslab_force_ganging_pct: u64 = 3,
    /// Txgs a loaded metaslab may go unused before it is unloaded (metaslab_unload_delay).
    metaslab_unload_delay: u64 = 32,
    /// Bytes of loaded metaslab free trees above which the least recently used are unloaded
    /// (zfs_metaslab_mem_limit, which OpenZFS gives as 25% of memory; tarn takes bytes).
    metaslab_mem_limit: u64 = 1 << 30,
    /// The heaviest metaslabs kept loaded per busy top-level vdev, the active one counted
    /// (metaslab_preload_limit; 0 turns preloading off).
    metaslab_preload_limit: u64 = 3,
    /// Pass from which blocks born in this txg are rewritten in place (zfs_sync_pass_rewrite).
    sync_pass_rewrite: u32 = 2,
    /// Pass from which frees are deferred to the next txg (zfs_sync_pass_deferred_free).
    sync_pass_deferred_free: u32 = 2,
    /// Pass from which compression is switched off (zfs_sync_pass_dont_compress).
    sync_pass_dont_compress: u32 = 8,
    /// Least time a txg spends on background frees (destroys) before it yields to a waiting
    /// sync, in milliseconds (zfs_free_min_time_ms).
    free_min_time_ms: u64 = 500,
    /// Most data blocks one txg frees in the background (zfs_async_block_max_blocks, which
    /// was zfs_free_max_blocks); unlimited by default.
    async_block_max_blocks: u64 = u64::MAX,
    /// What a free does with a gang block none of whose header copies can be read
    /// (zfs_free_leak_on_eio): false sets the block aside on the pool's stalled-free list (its
    /// space stays allocated and counted in `freeing`, and the free is retried at the next
    /// import); true leaks its space for good and counts it in the pool property `leaked`.
    free_leak_on_eio: bool = false,
    /// Least time a txg spends scrubbing, in milliseconds, before the scan pauses until the
    /// next txg (zfs_scrub_min_time_ms).
    scrub_min_time_ms: u64 = 750,
    /// Least time a txg spends resilvering, in milliseconds (zfs_resilver_min_time_ms).
    resilver_min_time_ms: u64 = 3000,
    /// Most blocks one txg scans (tarn's; unlimited by default). When limited, the scan no
    /// longer keeps the sync thread syncing back to back and advances once per txg timeout: a
    /// slow, predictable scan for tests that interrupt one.
    scan_blocks_per_txg_max: u64 = u64::MAX,
    /// Most bytes of the address space one RAID-Z expansion copy batch moves
    /// (raidz_expand_max_copy_bytes, 160 MiB in OpenZFS as ten 16 MiB copies; tarn issues one
    /// batch at a time, its largest block being 1 MiB).
    raidz_expand_max_copy_bytes: u64 = 16 << 20,
    /// Where a RAID-Z expansion's copy stops and waits (raidz_expand_max_reflow_bytes): once
    /// this many bytes of the address space are reflowed; 0 never. For tests that crash an
    /// expansion in its middle.
    raidz_expand_max_reflow_bytes: u64 = 0,
    /// Start a scrub when a RAID-Z expansion finishes (zfs_scrub_after_expand): the copy moves
    /// sectors without checking them.
    scrub_after_expand: bool = true,
    /// Record every block a scrub started in this process verifies (tarn's; off), so that a
    /// test can check the scrub's promise directly: every block born before it started and
    /// still in the pool when it ended was visited ([`crate::pool::scan::ScrubVisits`]).
    /// Costs a set entry per block scanned.
    scan_record_visits: bool = false,
    /// Most entries a clone's newest livelist sub-list takes before the next txg starts
    /// another (zfs_livelist_max_entries); frees of older blocks still go to their birth's
    /// sub-list. Also about the most entries condensing holds in memory.
    livelist_max_entries: u64 = 500_000,
    /// Logical bytes of WRITE records to one object that a receive applies in one transaction
    /// (zfs_recv_write_batch_size); at most 32 MiB. A record larger than it is a batch alone.
    recv_write_batch_size: u64 = 1 << 20,
    /// A receive asks for a txg sync each time it has written this share (1/n) of the dirty
    /// data that starts a sync by itself (dirty_data_max × dirty_data_sync_percent / 100), at
    /// least 1 MiB, so that the sync runs beside it (tarn's own; send/receive.rs). 0: never.
    recv_sync_share: u64 = 16,
    /// A clone's livelist is dropped (destroy then walks the tree) once the clone shares less
    /// than this percent of its referenced bytes with its origin
    /// (zfs_livelist_min_percent_shared).
    livelist_min_percent_shared: u64 = 75,
    /// A livelist sub-list is condensed (ALLOC/FREE pairs cancelled) once its FREE entries
    /// are at least half its entries and at least this many (OpenZFS condenses pairs of
    /// sub-lists when they hold few live entries; see docs/design/07-dataset.md §2.16).
    livelist_condense_min_frees: u64 = 1024,
    /// Time in milliseconds the txg sync spends applying livelist sub-lists read by the
    /// livelist reader (destroyed clones' frees, condensed sub-lists) before it leaves the rest
    /// to the next txg; the first is always applied (tarn's own: OpenZFS applies one sub-list
    /// per sync task). The default is tarn's `free_min_time_ms`, the share of a txg the other
    /// background frees get (OpenZFS's zfs_free_min_time_ms).
    livelist_sync_time_ms: u64 = 500,
    /// Percent of dirty_data_max that chunked frees of large files may dirty in one txg, in
    /// indirect blocks (zfs_per_txg_dirty_frees_percent).
    per_txg_dirty_frees_percent: u64 = 30,
    /// Files of more blocks than this are removed in chunks of this many blocks, one
    /// transaction each, parked in the unlinked set meanwhile (zfs_delete_blocks; the chunk is
    /// OpenZFS's DMU_MAX_DELETEBLKCNT, the same 20480).
    delete_blocks: u64 = 20_480,
    /// Writes of at least this many bytes are committed to the intent log by writing their
    /// blocks in place and logging the pointers (WR_INDIRECT) rather than copying the data
    /// into log blocks (zfs_immediate_write_sz).
    zil_immediate_write_sz: u64 = 32 << 10,
    /// Sync passes after which a txg that has not converged fails (the pool suspends).
    sync_pass_max: u32 = 100,
    /// Indirect block shift for new objects, 128 KiB (DN_MAX_INDBLKSHIFT).
    indirect_block_shift: u32 = 17,
    /// Indirect block shift of a new object set's meta-dnode, 16 KiB (tarn's own; OpenZFS uses
    /// DN_MAX_INDBLKSHIFT, 128 KiB). A txg rewrites the meta-dnode's indirect block above every
    /// dnode block it dirties, and the dnodes a txg dirties lie far apart once an object set
    /// holds many objects (a pool of 100,000 snapshots): a full 128 KiB block of pointers
    /// costs eight times a 16 KiB one to checksum, compress and write, for the same one change.
    meta_dnode_indirect_block_shift: u32 = 14,
    /// Data block size of the meta-dnode (dnodes per block = this / 512).
    dnode_block_size: u32 = 16 << 10,
    /// Dnodes each object set keeps decoded (OpenZFS's dnode handles): a lookup, stat or
    /// write of a file decodes its dnode from the meta-dnode's block once, not on every use.
    /// 0 turns the cache off.
    dnode_cache_entries: u64 = 16_384,
    /// Default recordsize for file systems.
    recordsize: u32 = 128 << 10,
    /// The ARC's ceiling and starting target in bytes (zfs_arc_max; see cache/pressure.rs for
    /// why it is small: the kernel page cache above FUSE caches file data too).
    arc_max: u64 = 256 << 20,
    /// The ARC's floor under memory pressure in bytes (zfs_arc_min; 0: arc_max / 4, at least
    /// 1 MiB).
    arc_min: u64 = 0,
    /// Free memory the ARC leaves the host, in bytes (zfs_arc_sys_free; 0: 1/32 of memory).
    arc_sys_free: u64 = 0,
    /// 1: the ARC keeps compressed blocks as stored and decompresses on a hit; 0: it keeps
    /// their decompressed contents (zfs_compressed_arc_enabled).
    compressed_arc_enabled: u32 = 1,
    /// Most bytes of decompressed copies the ARC keeps beside compressed metadata blocks (hot
    /// indirect, key/value and dnode blocks are then not decompressed on every hit), in percent
    /// of its target; 0: none (tarn's; OpenZFS's dbuf_metadata_cache plays this part).
    arc_meta_decoded_percent: u64 = 10,
    /// The same for compressed data blocks (a hot record is then not decompressed on every
    /// small read of it); 0: none (tarn's; OpenZFS's dbuf_cache, 1/32 of the ARC).
    arc_data_decoded_percent: u64 = 3,
    /// Most bytes the L2ARC feed writes to a cache device per feed (l2arc_write_max).
    l2arc_write_max: u64 = 8 << 20,
    /// Bytes the feed may write on top of l2arc_write_max while the ARC has never evicted
    /// (l2arc_write_boost: the cache is still warming).
    l2arc_write_boost: u64 = 8 << 20,
    /// How far up the ARC's lists the feed looks for candidates, as a multiple of its write
    /// budget (l2arc_headroom; 0: the whole lists).
    l2arc_headroom: u64 = 8,
    /// 1: blocks read by prefetch and not yet used are not written to the L2ARC
    /// (l2arc_noprefetch).
    l2arc_noprefetch: u32 = 1,
    /// Seconds between feeds (l2arc_feed_secs).
    l2arc_feed_secs: u64 = 1,
    /// Least milliseconds between feeds when the previous one wrote its whole budget and
    /// l2arc_feed_again is 1 (l2arc_feed_min_ms).
    l2arc_feed_min_ms: u64 = 200,
    /// 1: feed again sooner after a feed that wrote its whole budget (l2arc_feed_again).
    l2arc_feed_again: u32 = 1,
    /// 1: rebuild the L2ARC's headers from its log blocks at import (l2arc_rebuild_enabled).
    l2arc_rebuild_enabled: u32 = 1,
    /// Most memory the rebuilt L2ARC headers may take, in percent of arc_max
    /// (l2arc_meta_percent).
    l2arc_meta_percent: u64 = 33,
    /// 1 turns predictive prefetch of sequentially read file data off, 0 leaves it on
    /// (zfs_prefetch_disable).
    zfs_prefetch_disable: u32 = 0,
    /// First prefetch distance of a confirmed sequential stream, in bytes (zfetch_min_distance).
    zfetch_min_distance: u64 = 4 << 20,
    /// Largest prefetch distance of a stream, in bytes (zfetch_max_distance); also capped at a
    /// quarter of arc_max so that prefetched blocks are not evicted before they are read.
    zfetch_max_distance: u64 = 64 << 20,
    /// Sequential streams tracked per object (zfetch_max_streams).
    zfetch_max_streams: u32 = 8,
    /// Sector shift of new vdevs (ashift); 9 = 512 bytes, 12 = 4 KiB. 12 by default, as
    /// OpenZFS users set for modern disks: every block is 4 KiB aligned, which direct I/O needs.
    vdev_ashift: u32 = 12,
    /// Sync reads a leaf always lets run at once (zfs_vdev_sync_read_min_active).
    vdev_sync_read_min_active: u32 = 10,
    /// Most sync reads active on a leaf (zfs_vdev_sync_read_max_active).
    vdev_sync_read_max_active: u32 = 10,
    /// Sync writes a leaf always lets run at once (zfs_vdev_sync_write_min_active).
    vdev_sync_write_min_active: u32 = 10,
    /// Most sync writes active on a leaf (zfs_vdev_sync_write_max_active).
    vdev_sync_write_max_active: u32 = 10,
    /// Async (prefetch) reads a leaf always lets run at once (zfs_vdev_async_read_min_active).
    vdev_async_read_min_active: u32 = 1,
    /// Most async reads active on a leaf (zfs_vdev_async_read_max_active).
    vdev_async_read_max_active: u32 = 3,
    /// Txg writes active on a leaf at low dirty data (zfs_vdev_async_write_min_active).
    vdev_async_write_min_active: u32 = 2,
    /// Txg writes active on a leaf at high dirty data (zfs_vdev_async_write_max_active).
    vdev_async_write_max_active: u32 = 10,
    /// Below this percent of dirty_data_max, async writes run at their minimum
    /// (zfs_vdev_async_write_active_min_dirty_percent).
    vdev_async_write_active_min_dirty_percent: u64 = 30,
    /// Above this percent of dirty_data_max, async writes run at their maximum
    /// (zfs_vdev_async_write_active_max_dirty_percent).
    vdev_async_write_active_max_dirty_percent: u64 = 60,
    /// Scrub and check reads a leaf always lets run at once (zfs_vdev_scrub_min_active).
    vdev_scrub_min_active: u32 = 1,
    /// Most scrub and check reads active on a leaf (zfs_vdev_scrub_max_active).
    vdev_scrub_max_active: u32 = 2,
    /// Trims a leaf always lets run at once (zfs_vdev_trim_min_active).
    vdev_trim_min_active: u32 = 1,
    /// Most trims active on a leaf (zfs_vdev_trim_max_active).
    vdev_trim_max_active: u32 = 2,
    /// Rebuild I/Os a leaf always lets run at once (zfs_vdev_rebuild_min_active).
    vdev_rebuild_min_active: u32 = 1,
    /// Most rebuild I/Os active on a leaf (zfs_vdev_rebuild_max_active).
    vdev_rebuild_max_active: u32 = 3,
    /// Most I/Os of all classes active on a leaf (zfs_vdev_max_active).
    vdev_max_active: u32 = 1000,
    /// Largest I/O that adjacent queued requests are aggregated into, in bytes
    /// (zfs_vdev_aggregation_limit).
    vdev_aggregation_limit: u64 = 1 << 20,
    /// Most async (txg) writes active on a leaf while its sync writes are pending, active or
    /// completed within vdev_sync_write_window_us; caps vdev_async_write_min_active too (tarn's
    /// own: a file or virtual disk serves its writes in order, so a sync write waits for every
    /// byte issued before it). 0 turns the cap off.
    vdev_async_write_sync_max_active: u32 = 1,
    /// How long after a sync write completes the leaf still caps its async writes, in
    /// microseconds (tarn's own; covers the gap to the next write of an O_DSYNC stream).
    vdev_sync_write_window_us: u64 = 5000,
    /// Largest aggregated async write while the cap beside sync writes applies, in bytes (as
    /// zfs_vdev_aggregation_limit_non_rotating, which OpenZFS uses for file vdevs).
    vdev_aggregation_limit_sync: u64 = 128 << 10,
    /// A sync write its class may issue at once is executed by the thread that waits for it
    /// rather than handed to an issue thread (tarn's own: saves two thread wake-ups, which
    /// cost up to a scheduler tick each on a busy host).
    vdev_sync_write_inline: bool = true,
    /// A read its class may issue at once is executed by the thread that waits for it (tarn's
    /// own, as `vdev_sync_write_inline`: every read has a caller waiting for it).
    vdev_read_inline: bool = true,
    /// Threads per leaf that issue its queued I/O (tarn's own: OpenZFS issues to the kernel's
    /// block layer asynchronously); bounds how many of the active I/Os really run at once. Two
    /// of them are kept for sync reads and writes.
    vdev_issue_threads: u32 = 16,
    /// Asynchronous writes the sync thread queues before it wakes an issue thread for them
    /// (tarn's own, as a block layer's plug: a burst costs a wake-up per batch and adjacent
    /// writes aggregate); 0 wakes one per write.
    vdev_plug_batch: u32 = 64,
}

impl Tunables {
    /// Defaults overridden from `TARN_TUNABLE_<name>` environment variables. Unknown names and
    /// unparsable values are errors, not silently ignored.
    pub fn from_env() -> Result<Tunables, String> {
        let mut tunables = Tunables::default();
        for (key, value) in std::env::vars() {
            if let Some(name) = key.strip_prefix("TARN_TUNABLE_") {
                tunables.set_unchecked(name, &value).map_err(|error| {
                    let known: Vec<&str> = Tunables::default()
                        .describe()
                        .into_iter()
                        .map(|(name, _, _)| name)
                        .collect();
                    format!("{key}: {error} (known tunables: {})", known.join(", "))
                })?;
            }
        }
        tunables.validate()?;
        Ok(tunables)
    }

    /// The tiny test configuration: 1 MiB metaslabs, 1 KiB indirect blocks (8 pointers each),
    /// 4 KiB records, a 1 MiB cache and a one-second txg timeout.
    pub fn tiny() -> Tunables {
        Tunables {
            txg_timeout: 1,
            dirty_data_max: 16 << 20,
            vdev_default_ms_shift: 20,
            vdev_min_ms_shift: 20,
            metaslab_sm_blksz: 4 << 10,
            metaslab_sm_blksz_with_log: 4 << 10,
            log_sm_blksz: 4 << 10,
            unflushed_log_block_min: 16,
            unflushed_log_block_max: 256,
            unflushed_log_txg_max: 32,
            unflushed_max_mem_amt: 64 << 10,
            metaslab_aliquot: 64 << 10,
            metaslab_unload_delay: 8,
            indirect_block_shift: 10,
            meta_dnode_indirect_block_shift: 10,
            dnode_block_size: 4 << 10,
            recordsize: 4 << 10,
            arc_max: 1 << 20,
            vdev_ashift: 9,
            livelist_max_entries: 256,
            livelist_condense_min_frees: 16,
            ..Tunables::default()
        }
    }

    /// Check that every tunable is in the range the engine and its on-disk format support.
    pub fn validate(&self) -> Result<(), String> {
        let check = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(format!("tunable out of range: {what}"))
            }
        };
        check(
            (10..=17).contains(&self.indirect_block_shift)
                && (10..=17).contains(&self.meta_dnode_indirect_block_shift),
            "indirect_block_shift and meta_dnode_indirect_block_shift must be 10..=17",
        )?;
        check(self.delete_blocks >= 1, "delete_blocks must be >= 1")?;
        check(
            self.raidz_expand_max_copy_bytes >= 1 << 16,
            "raidz_expand_max_copy_bytes must be at least 64 KiB",
        )?;
        check(
            self.compressed_arc_enabled <= 1,
            "compressed_arc_enabled must be 0 or 1",
        )?;
        check(
            self.arc_meta_decoded_percent <= 100 && self.arc_data_decoded_percent <= 100,
            "arc_meta_decoded_percent and arc_data_decoded_percent must be 0..=100",
        )?;
        check(
            self.livelist_max_entries >= 1,
            "livelist_max_entries must be >= 1",
        )?;
        check(
            self.recv_write_batch_size <= 32 << 20,
            "recv_write_batch_size must be at most 32 MiB",
        )?;
        check(
            self.livelist_min_percent_shared <= 100,
            "livelist_min_percent_shared must be 0..=100",
        )?;
        check(
            (1..=100).contains(&self.per_txg_dirty_frees_percent),
            "per_txg_dirty_frees_percent must be 1..=100",
        )?;
        check(
            self.async_block_max_blocks >= 1,
            "async_block_max_blocks must be >= 1",
        )?;
        check(
            self.scan_blocks_per_txg_max >= 1,
            "scan_blocks_per_txg_max must be >= 1",
        )?;
        check(
            (9..=16).contains(&self.vdev_ashift),
            "vdev_ashift must be 9..=16",
        )?;
        check(
            self.dnode_block_size.is_power_of_two()
                && (4096..=(128 << 10)).contains(&self.dnode_block_size),
            "dnode_block_size must be a power of two from 4096 to 131072",
        )?;
        check(
            self.recordsize.is_power_of_two() && (512..=(1 << 20)).contains(&self.recordsize),
            "recordsize must be a power of two from 512 to 1048576",
        )?;
        check(
            self.metaslab_sm_blksz.is_power_of_two()
                && (4096..=(128 << 10)).contains(&self.metaslab_sm_blksz),
            "metaslab_sm_blksz must be a power of two from 4096 to 131072",
        )?;
        for (name, size) in [
            (
                "metaslab_sm_blksz_with_log",
                self.metaslab_sm_blksz_with_log,
            ),
            ("log_sm_blksz", self.log_sm_blksz),
        ] {
            check(
                size.is_power_of_two() && (4096..=(128 << 10)).contains(&size),
                &format!("{name} must be a power of two from 4096 to 131072"),
            )?;
        }
        check(
            self.unflushed_log_block_min >= 1
                && self.unflushed_log_block_min <= self.unflushed_log_block_max,
            "unflushed_log_block_min must be >= 1 and <= unflushed_log_block_max",
        )?;
        check(
            self.unflushed_log_block_pct >= 100,
            "unflushed_log_block_pct must be >= 100",
        )?;
        check(
            self.unflushed_log_txg_max >= 2,
            "unflushed_log_txg_max must be >= 2",
        )?;
        check(
            (1..=1000).contains(&self.max_logsm_summary_length),
            "max_logsm_summary_length must be 1..=1000",
        )?;
        check(
            self.min_metaslabs_to_flush >= 1 && self.max_log_walking >= 1,
            "min_metaslabs_to_flush and max_log_walking must be >= 1",
        )?;
        check(
            self.vdev_min_ms_shift >= crate::types::METASLAB_SHIFT_MIN
                && self.vdev_min_ms_shift <= self.vdev_max_ms_shift,
            "vdev_min_ms_shift must be >= 16 and <= vdev_max_ms_shift",
        )?;
        check(
            self.vdev_max_ms_shift <= 40,
            "vdev_max_ms_shift must be <= 40",
        )?;
        check(
            self.vdev_min_ms_count >= 1,
            "vdev_min_ms_count must be >= 1",
        )?;
        // Import refuses a vdev of more metaslabs than this (a bound on what a label can make
        // it allocate), so no pool may be created with more.
        check(
            [
                self.vdev_min_ms_count,
                self.vdev_default_ms_count,
                self.vdev_ms_count_limit,
            ]
            .iter()
            .all(|&count| count <= crate::types::METASLAB_COUNT_MAX),
            "vdev_min_ms_count, vdev_default_ms_count and vdev_ms_count_limit must be <= 131072",
        )?;
        check(
            self.sync_pass_rewrite >= 2,
            "sync_pass_rewrite must be >= 2",
        )?;
        check(
            self.sync_pass_deferred_free >= 2,
            "sync_pass_deferred_free must be >= 2",
        )?;
        check(self.sync_pass_max >= 8, "sync_pass_max must be >= 8")?;
        check(
            self.dirty_data_max >= 1 << 20,
            "dirty_data_max must be at least 1 MiB",
        )?;
        check(
            self.delay_min_dirty_percent < 100 && self.dirty_data_sync_percent <= 100,
            "delay_min_dirty_percent must be below 100 and dirty_data_sync_percent at most 100",
        )?;
        check(
            self.zfs_prefetch_disable <= 1,
            "zfs_prefetch_disable must be 0 or 1",
        )?;
        check(
            self.metaslab_condense_pct >= 100,
            "metaslab_condense_pct must be >= 100",
        )?;
        let classes = [
            (
                "sync_read",
                self.vdev_sync_read_min_active,
                self.vdev_sync_read_max_active,
            ),
            (
                "sync_write",
                self.vdev_sync_write_min_active,
                self.vdev_sync_write_max_active,
            ),
            (
                "async_read",
                self.vdev_async_read_min_active,
                self.vdev_async_read_max_active,
            ),
            (
                "async_write",
                self.vdev_async_write_min_active,
                self.vdev_async_write_max_active,
            ),
            (
                "scrub",
                self.vdev_scrub_min_active,
                self.vdev_scrub_max_active,
            ),
            ("trim", self.vdev_trim_min_active, self.vdev_trim_max_active),
            (
                "rebuild",
                self.vdev_rebuild_min_active,
                self.vdev_rebuild_max_active,
            ),
        ];
        for (class, min, max) in classes {
            if !(1..=max).contains(&min) || max > self.vdev_max_active {
                return Err(format!(
                    "tunable out of range: vdev_{class}_min_active ({min}) must be at least 1 and \
                     at most vdev_{class}_max_active ({max}), which is at most vdev_max_active ({})",
                    self.vdev_max_active
                ));
            }
        }
        check(
            (1..=100_000).contains(&self.vdev_max_active),
            "vdev_max_active must be 1..=100000",
        )?;
        check(
            self.vdev_plug_batch <= 4096,
            "vdev_plug_batch must be at most 4096 (0 turns plugging off)",
        )?;
        check(
            self.vdev_aggregation_limit <= 16 << 20,
            "vdev_aggregation_limit must be at most 16777216 (0 turns aggregation off)",
        )?;
        check(
            (4096..=16 << 20).contains(&self.vdev_aggregation_limit_sync)
                && self.vdev_aggregation_limit_sync.is_multiple_of(4096)
                && self.vdev_sync_write_window_us <= 10_000_000
                && self.vdev_async_write_sync_max_active <= self.vdev_max_active,
            "vdev_aggregation_limit_sync must be a multiple of 4096 up to 16777216, \
             vdev_sync_write_window_us \
             at most 10000000 and vdev_async_write_sync_max_active at most vdev_max_active",
        )?;
        check(
            self.vdev_async_write_active_min_dirty_percent
                < self.vdev_async_write_active_max_dirty_percent
                && self.vdev_async_write_active_max_dirty_percent <= 100,
            "vdev_async_write_active_min_dirty_percent must be below \
             vdev_async_write_active_max_dirty_percent, which is at most 100",
        )?;
        check(
            (1..=1024).contains(&self.vdev_issue_threads),
            "vdev_issue_threads must be 1..=1024",
        )?;
        check(
            (1 << 20..=1 << 30).contains(&self.l2arc_write_max)
                && self.l2arc_write_boost <= 1 << 30,
            "l2arc_write_max must be 1 MiB..=1 GiB and l2arc_write_boost at most 1 GiB",
        )?;
        check(
            self.l2arc_meta_percent <= 100 && self.l2arc_feed_secs <= 3600,
            "l2arc_meta_percent must be at most 100 and l2arc_feed_secs at most 3600",
        )?;
        Ok(())
    }

    pub fn txg_timeout_duration(&self) -> Duration {
        Duration::from_secs(self.txg_timeout.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_by_name_parses_and_rejects() {
        let mut tunables = Tunables::default();
        tunables.set("txg_timeout", "1").unwrap();
        assert_eq!(tunables.txg_timeout, 1);
        assert!(tunables.set("txg_timeout", "soon").is_err());
        assert!(tunables.set("no_such_knob", "1").is_err());
        assert!(tunables.set("indirect_block_shift", "20").is_err());
        assert_eq!(
            tunables.indirect_block_shift, 17,
            "a refused value leaves the old one"
        );
        assert!(Tunables::tiny().validate().is_ok());
        assert!(tunables.set("vdev_async_write_min_active", "11").is_err());
        assert!(tunables.set("vdev_sync_read_min_active", "0").is_err());
        assert!(tunables
            .set("vdev_async_write_active_min_dirty_percent", "60")
            .is_err());
        tunables.set("vdev_async_write_max_active", "20").unwrap();
        assert_eq!(tunables.vdev_async_write_max_active, 20);
        assert!(Tunables::default().validate().is_ok());
    }

    #[test]
    fn describe_lists_every_tunable() {
        let described = Tunables::default().describe();
        assert!(described
            .iter()
            .any(|(name, value, _)| *name == "txg_timeout" && value == "5"));
    }
}
