//! The store in a cluster with replicas (docs/cluster.md, "Replicas"): as an owner, its commit
//! log hands each flush to the cluster's replicator; as a copy, it takes the owners' frames in.

use std::sync::Arc;

use super::Store;
use crate::{
    commitlog::Replicate,
    partition::{
        sql,
        writer::{Adopt, Job, Replicated},
    },
    replication::{self, Frame, Receipt},
    Error, Result,
};

impl Store {
    /// Has the commit log hand every later flush to `replicator`, whose answer writers then
    /// wait for. Refused without a commit log (`synchronous = full`, `commit_log` on).
    pub fn replicate_with(&self, replicator: Arc<dyn Replicate>) -> Result<()> {
        self.log.as_ref().ok_or_else(no_log)?.set_replicator(replicator);
        Ok(())
    }

    /// The epoch partition `partition`'s versions carry here: what a copy made owner keeps.
    pub fn epoch_of(&self, partition: u32) -> Result<u64> {
        Ok(self.partition(partition)?.epoch())
    }

    /// Where this node's commit log ends: the owner's position in its own log, which its copies
    /// hold up to once every flush before now has been acknowledged. `None` without a log.
    pub fn log_position(&self) -> Option<u64> {
        self.log.as_deref().map(crate::commitlog::CommitLog::end)
    }

    /// Takes in a frame of `owner`'s transactions for the copies this node keeps; once it
    /// answers [`Receipt::Held`], they are durable here.
    pub fn receive(&self, owner: &str, frame: Frame) -> Result<Receipt> {
        let log = self.log.as_deref().ok_or_else(no_log)?;
        replication::receive(&self.sources, owner, frame, log, self.manifest.partitions, &mut |p, txs, reply| {
            self.apply(p, txs, reply)
        })
    }

    /// Seals the dead `owner` (a failover): no frame of its is taken any more. Where this
    /// node's copies of its partitions stand.
    pub fn seal(&self, owner: &str) -> replication::Sealed {
        replication::seal(&self.sources, owner)
    }

    /// If this node's copy of `partition`, kept for `owner`, follows the owner's stream (a frame
    /// taken since the start, the owner not sealed, no snapshot awaited), how long ago it took
    /// the owner's last frame: a read of it lags the owner by what is in flight.
    pub fn copy_heard(&self, owner: &str, partition: u32) -> Option<std::time::Duration> {
        replication::heard(&self.sources, owner, partition)
    }

    /// Takes `owner`'s frames again if a failover sealed it (it came back): whether it was.
    pub fn unseal(&self, owner: &str) -> bool {
        replication::unseal(&self.sources, owner)
    }

    /// What a copy of `partition` at `after` in `owner`'s log lacks, from this node's copy.
    pub fn tail(&self, owner: &str, partition: u32, after: u64) -> Result<Frame> {
        self.partition(partition)?;
        replication::tail(&self.sources, owner, partition, after)
    }

    /// Brings this node's copy of `partition` up to date with `frame`, the tail of a more
    /// advanced copy (a failover of the sealed `owner`): every transaction held is applied.
    pub fn catch_up(&self, owner: &str, partition: u32, frame: Frame) -> Result<()> {
        self.partition(partition)?;
        let log = self.log.as_deref().ok_or_else(no_log)?;
        let (done, applied) = oneshot::channel();
        replication::catch_up(
            &self.sources,
            owner,
            partition,
            frame,
            log,
            &mut |p, txs, r| self.apply(p, txs, r),
            done,
        )?;
        applied.recv().map_err(|_| Error::Closed)?
    }

    /// Makes this node's copy of `partition` its own (a failover of the sealed `owner`): every
    /// transaction held is applied, and the partition keeps the owner's epoch, so every tag
    /// the owner gave stays valid. Its live records.
    pub fn promote(&self, owner: &str, partition: u32) -> Result<u64> {
        self.partition(partition)?;
        let log = self.log.as_deref().ok_or_else(no_log)?;
        let (done, applied) = oneshot::channel();
        let epoch =
            replication::promote(&self.sources, owner, partition, log, &mut |p, txs, r| self.apply(p, txs, r), done)?;
        self.made_own(partition, applied, Some(epoch.unwrap_or(0)))
    }

    /// `owner`, alive, hands `partition` over ([`replication::hand_over`]): every transaction
    /// of it held through `through` is applied; with `epoch`, this node becomes its owner and
    /// its versions carry `owner`'s epoch (0: a new one), so every tag the owner gave stays
    /// valid. Its live records.
    pub fn hand_over(&self, owner: &str, partition: u32, through: u64, epoch: Option<u64>) -> Result<u64> {
        self.partition(partition)?;
        let log = self.log.as_deref().ok_or_else(no_log)?;
        let (done, applied) = oneshot::channel();
        let mut apply = |p, txs, r| self.apply(p, txs, r);
        replication::hand_over(&self.sources, owner, partition, through, log, &mut apply, done)?;
        self.made_own(partition, applied, epoch)
    }

    /// Once the transactions of `partition` held from its owner are applied (`applied` answers),
    /// with `epoch` makes the copy this node's, its versions carrying that epoch (0: a new one).
    /// Its live records.
    fn made_own(&self, partition: u32, applied: oneshot::Receiver<Result<()>>, epoch: Option<u64>) -> Result<u64> {
        applied.recv().map_err(|_| Error::Closed)??;
        if let Some(epoch) = epoch {
            self.shared.control(partition, |reply| Job::Adopt { partition, step: Adopt::Keep { epoch }, reply })??;
        }
        Ok(self.partition(partition)?.counters.records.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Where a snapshot for a copy taken now begins: ask before [`Store::send_copy`]. The
    /// snapshot holds every transaction of the log before it.
    pub fn copy_position(&self) -> Result<u64> {
        self.log_position().ok_or_else(no_log)
    }

    /// Writes partition `partition` as a transfer stream for a copy brought up to date from a
    /// snapshot: taken on its writer between two rounds, so every transaction appended to the
    /// log before [`Store::copy_position`] was asked is in it.
    pub fn send_copy(&self, partition: u32, piece: usize, send: impl FnMut(Vec<u8>) -> Result<()>) -> Result<()> {
        let handle = self.partition(partition)?;
        let conn = Box::new(sql::open_reader(&handle.db_path, &self.config)?);
        let snapshot = self.shared.control(partition, |reply| Job::Snapshot { partition, conn, reply })??;
        let _reading = handle.long_read();
        let counts = (snapshot.next_id, snapshot.records);
        super::transfer::stream_snapshot(&snapshot.conn, counts, None, handle.epoch(), piece, send)
    }

    /// `partition`'s copy was just taken in from `owner`'s snapshot at `position`
    /// ([`Store::adopt`]): the transactions held since are applied.
    pub fn resynced(&self, owner: &str, partition: u32, position: u64) -> Result<()> {
        self.partition(partition)?;
        let log = self.log.as_deref().ok_or_else(no_log)?;
        replication::resynced(&self.sources, owner, partition, position, log, &mut |p, txs, r| self.apply(p, txs, r))
    }

    /// Before a clean close: applies what the copies hold of their owners' logs but what the
    /// next open holds again, and says where the copies stand ([`replication::closing`]).
    /// `None` without a commit log (no copies).
    pub(super) fn close_copies(&self) -> Option<replication::Positions> {
        let log = self.log.as_deref()?;
        Some(replication::closing(&self.sources, log, &mut |p, txs, r| self.apply(p, txs, r)))
    }

    /// Hands a copy's transactions to the partition's writer.
    fn apply(&self, partition: u32, txs: Vec<Replicated>, reply: Option<oneshot::Sender<Result<()>>>) -> Result<()> {
        let job = Job::Replicated { partition, txs, reply };
        self.shared.queue(partition)?.send(job).map_err(|_| Error::Closed)
    }
}

fn no_log() -> Error {
    Error::Replication("replicas need the commit log: synchronous = full and commit_log on".into())
}
