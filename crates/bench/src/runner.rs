//! One measured run of one workload: the connections (one tokio task each, all driven by the
//! same loop whatever the [`Schedule`]), the warm-up, the measured window, the cost sampler
//! beside them, and the server's own request counter read before and after. Against a cluster
//! (`--url` of a node, [`ClusterRoutes`]) each connection task holds a connection per node and
//! sends each request to its key's owner.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use hyper::Method;
use serde::Serialize;
use shardlite_proc::ProcessStats;

use crate::{
    cluster::{ClusterRoutes, NodeTally, ROUTED},
    cost::{self, Local, Sample, ServerStats},
    http::{DrivenConn, Target},
    keyspace,
    recorder::{Outcome, Recorder},
    schedule::{Pacer, Schedule},
    workload::{connection_seed, FreshKeys, KeyDist, Keys, Mix, Op, OpGen, Workload},
};

/// After a failed connect, wait this long before the next attempt, so a dead server is not
/// hammered in a tight loop.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct RunOptions {
    /// The workload.
    pub workload: Workload,
    /// Proportions of `mix`.
    pub mix: Mix,
    /// Key choice for selects and updates.
    pub dist: KeyDist,
    /// Pacing.
    pub schedule: Schedule,
    /// Requests before the measured window (not recorded; the server still counts them).
    #[serde(serialize_with = "secs")]
    pub warmup: Duration,
    /// The measured window.
    #[serde(serialize_with = "secs")]
    pub duration: Duration,
    /// A request without an answer after this long is a timeout error.
    #[serde(serialize_with = "secs")]
    pub timeout: Duration,
    /// Selects and updates choose from key indices `0..records`.
    pub records: u64,
    /// Seed of the key space (as given to `shardlite load`).
    pub seed: u64,
    /// Key bytes.
    pub key_size: usize,
    /// Value bytes of inserts and updates.
    pub value_size: usize,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// What a run observed.
#[derive(Debug)]
pub struct RunResult {
    /// Every connection's observations, merged.
    pub recorded: Recorder,
    /// The measured window as it really was (from its start to the last answer).
    pub elapsed: Duration,
    /// Cost samples: at the start of the measured window, every second, and at its end.
    pub samples: Vec<Sample>,
    /// Requests the server counted on the workload's route during the run (from `/metrics`),
    /// where it has that counter.
    pub server_counted: Option<u64>,
    /// `/stats` before the first request and after the last answer (every insert included).
    pub stats_before: Option<ServerStats>,
    /// See `stats_before`.
    pub stats_after: Option<ServerStats>,
    /// CPU seconds the generator's process used during the measured window.
    pub generator_cpu_seconds: f64,
    /// Against a cluster: the requests sent to each node and how many it served directly.
    pub nodes: Vec<NodeTally>,
}

/// Runs one workload against `target`, or against each key's owner in `routes` (a cluster of
/// which `target` is a node). Inserts take indices from `fresh`.
pub async fn run(
    target: &Target,
    routes: Option<&Arc<ClusterRoutes>>,
    local: &Local,
    opts: &RunOptions,
    fresh: &Arc<FreshKeys>,
) -> RunResult {
    let route = if opts.workload == Workload::Noop { "/healthz" } else { "/kv/{key}" };
    let counted_before = cost::server_request_count(target, route).await;
    let stats_before = ServerStats::fetch(target).await;
    let keys = Keys::new(opts.dist, opts.records);
    let start = Instant::now();
    let measure_start = start + opts.warmup;
    let end = measure_start + opts.duration;
    let opts_arc = Arc::new(opts.clone());
    let connections: Vec<_> = (0..opts.schedule.connections())
        .map(|c| {
            let gen = OpGen::new(
                opts.workload,
                opts.mix,
                keys.clone(),
                Arc::clone(fresh),
                connection_seed(opts.seed, opts.workload, opts.schedule.connections(), c),
            );
            let window = Window { start, measure_start, end };
            let (target, routes) = (target.clone(), routes.cloned());
            let task = Connection { target, routes, opts: Arc::clone(&opts_arc), gen, window };
            tokio::spawn(task.run(opts.schedule.pacer(c)))
        })
        .collect();
    let sampler = tokio::spawn(cost::sample_every_second(target.clone(), local.clone(), measure_start, end));
    tokio::time::sleep_until(measure_start.into()).await;
    let cpu_before = ProcessStats::read().cpu_seconds();
    let mut recorded = Recorder::default();
    for conn in connections {
        // A task that panicked recorded nothing; its requests show up in the server's count.
        if let Ok(r) = conn.await {
            recorded.merge(&r);
        }
    }
    let elapsed = measure_start.elapsed();
    let generator_cpu_seconds = ProcessStats::read().cpu_seconds() - cpu_before;
    let samples = sampler.await.unwrap_or_default();
    let counted_after = cost::server_request_count(target, route).await;
    let stats_after = ServerStats::fetch(target).await;
    let server_counted = counted_before.zip(counted_after).map(|(b, a)| a.saturating_sub(b));
    let nodes = routes.map(|r| r.tally(&recorded.node_sent, &recorded.node_misdirected)).unwrap_or_default();
    RunResult { recorded, elapsed, samples, server_counted, stats_before, stats_after, generator_cpu_seconds, nodes }
}

/// The run's timeline.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    measure_start: Instant,
    end: Instant,
}

/// One connection's task.
struct Connection {
    target: Target,
    /// Against a cluster: the map each request is routed by (instead of `target`).
    routes: Option<Arc<ClusterRoutes>>,
    opts: Arc<RunOptions>,
    gen: OpGen,
    window: Window,
}

/// Why the request loop on one connection stopped.
enum Stop {
    /// The run is over.
    Done,
    /// The connection is unusable (timeout, failure): open another.
    Broken,
}

impl Connection {
    async fn run(mut self, mut pacer: Option<Pacer>) -> Recorder {
        let mut rec = Recorder::default();
        match self.routes.clone() {
            Some(routes) => self.routed(&routes, pacer.as_mut(), &mut rec).await,
            None => self.direct(pacer.as_mut(), &mut rec).await,
        }
        let w = self.window;
        if let Some(p) = &pacer {
            rec.unsent += p.unsent_before(w.end - w.start);
        }
        rec
    }

    /// Every request to `target` on one connection, opened again after it broke.
    async fn direct(&mut self, mut pacer: Option<&mut Pacer>, rec: &mut Recorder) {
        let w = self.window;
        loop {
            if Instant::now() >= w.end {
                break;
            }
            let (conn, driver) = match self.target.connect().await {
                Ok(c) => c,
                Err(_) => {
                    self.connect_failed(rec).await;
                    continue;
                }
            };
            // The driver and the request loop share this task: no wake-up of another task per
            // request. The loop owns the sender; dropping it at the end lets the driver finish.
            let requests = self.requests(conn, pacer.as_deref_mut(), rec);
            let ((), stop) = tokio::join!(
                async {
                    let _ = driver.await;
                },
                requests
            );
            if matches!(stop, Stop::Done) {
                break;
            }
        }
    }

    async fn requests(
        &mut self,
        mut conn: crate::http::Conn,
        mut pacer: Option<&mut Pacer>,
        rec: &mut Recorder,
    ) -> Stop {
        loop {
            let Some((intended, late)) = self.next_slot(pacer.as_deref_mut()).await else { return Stop::Done };
            let (method, key, body) = self.next_call();
            let Ok(req) = self.target.request(method, &path(key.as_deref()), body) else { return Stop::Done };
            rec.sent += 1;
            let answer = tokio::time::timeout(self.opts.timeout, conn.send(req)).await;
            if !matches!(self.answered(rec, intended, late, answer), Outcome::Status(_)) {
                return Stop::Broken;
            }
        }
    }

    /// Each request to its key's owner in `routes`, on a connection per node, opened when first
    /// needed and again after it broke.
    async fn routed(&mut self, routes: &ClusterRoutes, mut pacer: Option<&mut Pacer>, rec: &mut Recorder) {
        let mut conns: Vec<Option<DrivenConn>> = routes.nodes.iter().map(|_| None).collect();
        while let Some((intended, late)) = self.next_slot(pacer.as_deref_mut()).await {
            let (method, key, body) = self.next_call();
            let node = key.as_deref().map_or(0, |k| routes.node_of(k));
            let target = &routes.nodes[node].1;
            let conn = match &mut conns[node] {
                Some(conn) => conn,
                empty => match DrivenConn::open(target).await {
                    Ok(conn) => empty.insert(conn),
                    Err(_) => {
                        self.connect_failed(rec).await;
                        continue;
                    }
                },
            };
            let Ok(mut req) = target.request(method, &path(key.as_deref()), body) else { return };
            let (name, value) = ROUTED;
            req.headers_mut().insert(name, value);
            rec.sent += 1;
            let answer = tokio::time::timeout(self.opts.timeout, conn.send(req)).await;
            let outcome = self.answered(rec, intended, late, answer);
            rec.count_node(node, outcome == Outcome::Status(421));
            if !matches!(outcome, Outcome::Status(_)) {
                conns[node] = None;
            }
        }
    }

    /// When the next request is due and whether it is late (open loop: its slot, waited for;
    /// closed loop: now); `None` once the run is over.
    async fn next_slot(&self, pacer: Option<&mut Pacer>) -> Option<(Instant, bool)> {
        let w = self.window;
        match pacer {
            Some(p) => {
                if w.start + p.peek() >= w.end {
                    return None;
                }
                let slot = p.next_slot(w.start.elapsed());
                tokio::time::sleep_until((w.start + slot.intended).into()).await;
                Some((w.start + slot.intended, slot.late))
            }
            None => {
                let now = Instant::now();
                (now < w.end).then_some((now, false))
            }
        }
    }

    /// Records the answer to a request due at `intended`; its outcome.
    fn answered(
        &self,
        rec: &mut Recorder,
        intended: Instant,
        late: bool,
        answer: Result<anyhow::Result<(u16, Bytes)>, tokio::time::error::Elapsed>,
    ) -> Outcome {
        let (w, done) = (self.window, Instant::now());
        let outcome = match answer {
            Ok(Ok((status, _))) => Outcome::Status(status),
            Ok(Err(_)) => Outcome::Connection,
            Err(_) => Outcome::Timeout,
        };
        rec.created_all += u64::from(outcome == Outcome::Status(201));
        if intended >= w.measure_start {
            rec.late += u64::from(late);
            rec.record(done - w.measure_start, done - intended, outcome);
        }
        outcome
    }

    /// Records a failed connect (in the measured window) and waits before the next attempt.
    async fn connect_failed(&self, rec: &mut Recorder) {
        let now = Instant::now();
        if now >= self.window.measure_start {
            rec.record(now - self.window.measure_start, Duration::ZERO, Outcome::Connection);
        }
        tokio::time::sleep(RECONNECT_BACKOFF).await;
    }

    /// The next operation: its method, its key (none for `noop`) and its body.
    fn next_call(&mut self) -> (Method, Option<Vec<u8>>, Bytes) {
        let o = &self.opts;
        let key = |i: u64| keyspace::key(o.seed, i, o.key_size);
        match self.gen.next_op() {
            Op::Noop => (Method::GET, None, Bytes::new()),
            Op::Select(i) => (Method::GET, Some(key(i)), Bytes::new()),
            // An inserted record gets the value the loader would have given record i.
            Op::Insert(i) => (Method::PUT, Some(key(i)), keyspace::value(o.seed, i, o.value_size).into()),
            // An update writes a value different from the loaded one.
            Op::Update(i) => {
                (Method::PUT, Some(key(i)), keyspace::value(o.seed.wrapping_add(1), i, o.value_size).into())
            }
        }
    }
}

/// The path of a request for `key` (`/kv/{hex}`), or `/healthz` for none.
fn path(key: Option<&[u8]>) -> String {
    key.map_or_else(|| "/healthz".to_owned(), |k| format!("/kv/{}", hex::encode(k)))
}
