//! Several GPUs: who this process is (its rank, from `planc run`'s launcher, `torchrun` or
//! Slurm), how the ranks meet (rank 0 listens on the master address and hands every rank
//! the NCCL unique ids of its groups over TCP), the communicators, and the watchdog that
//! turns a hang into an error naming the collective each rank waits in.
//!
//! Ranks are laid out as `planc check` places them: tensor-parallel innermost, then data,
//! then pipeline (rank = tp_rank + tp·(dp_rank + dp·pp_rank)).

use std::ffi::c_void;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::nccl::result as nccl;
use cudarc::nccl::sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};

use planc_compiler::plan::Precision;

use super::cuda::Buf;
use super::trail;
use crate::error::RunError;

/// This process's place in the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct World {
    pub rank: usize,
    pub size: usize,
    /// The GPU ordinal on this node.
    pub local_rank: usize,
    /// `host:port` where rank 0 listens.
    pub master: String,
}

impl World {
    pub const ONE: World = World {
        rank: 0,
        size: 1,
        local_rank: 0,
        master: String::new(),
    };

    /// The world from the environment: planc's own launcher sets `PLANC_RANK`,
    /// `PLANC_LOCAL_RANK`, `PLANC_WORLD_SIZE`, `PLANC_MASTER`; torchrun sets `RANK`,
    /// `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`. None when neither did.
    pub fn from_env() -> Option<World> {
        let var = |k: &str| std::env::var(k).ok();
        let num = |k: &str| var(k).and_then(|v| v.parse::<usize>().ok());
        if let (Some(rank), Some(size), Some(master)) = (
            num("PLANC_RANK"),
            num("PLANC_WORLD_SIZE"),
            var("PLANC_MASTER"),
        ) {
            return Some(World {
                rank,
                size,
                local_rank: num("PLANC_LOCAL_RANK").unwrap_or(0),
                master,
            });
        }
        if let (Some(rank), Some(size), Some(addr), Some(port)) = (
            num("RANK"),
            num("WORLD_SIZE"),
            var("MASTER_ADDR"),
            var("MASTER_PORT"),
        ) {
            return Some(World {
                rank,
                size,
                local_rank: num("LOCAL_RANK").unwrap_or(0),
                master: format!("{addr}:{port}"),
            });
        }
        None
    }
}

/// A NCCL communicator over one group, driven on one stream.
pub struct Comm {
    raw: ncclComm_t,
    pub rank: usize,
    pub size: usize,
    pub name: String,
}

// SAFETY: a communicator is used by one thread at a time (the rank's main thread); the
// watchdog only aborts it, which NCCL allows from another thread.
unsafe impl Send for Comm {}
unsafe impl Sync for Comm {}

fn nerr(what: &str, e: impl std::fmt::Debug) -> RunError {
    RunError::Cuda(format!("NCCL {what}: {e:?}"))
}

/// The NCCL element type of activations stored in `precision`: the storage type the
/// kernels use (`cuda::storage_code`); fp8 training stores its activations in bf16 (only its
/// products' operands are fp8). Every precision named, so a new one cannot fall to another
/// element size: fp8 did, and its tensor-parallel all-reduces and pipeline sends moved
/// twice the bytes as fp32 (a NaN loss at tp 2's first step, 2026-11-28).
pub fn activation_type(precision: Precision) -> ncclDataType_t {
    match precision {
        Precision::Bf16 | Precision::Fp8 => ncclDataType_t::ncclBfloat16,
        Precision::Fp16 => ncclDataType_t::ncclFloat16,
        Precision::Fp32 => ncclDataType_t::ncclFloat32,
    }
}

/// Runs `f`'s collectives as one NCCL group (one launch for many small tensors).
pub fn grouped(f: impl FnOnce() -> Result<(), RunError>) -> Result<(), RunError> {
    nccl::group_start().map_err(|e| nerr("group start", e))?;
    trail::group_start();
    let r = f();
    let end = nccl::group_end().map_err(|e| nerr("group end", e));
    trail::group_end();
    r.and(end.map(|_| ()))
}

impl Comm {
    /// The end of every operation: its NCCL error, or its place on the step's trail.
    fn queued(
        &self,
        r: Result<nccl::NcclStatus, nccl::NcclError>,
        what: &str,
        stream: u64,
        describe: impl FnOnce() -> String,
    ) -> Result<(), RunError> {
        r.map_err(|e| nerr(what, e))?;
        trail::queued(describe, stream);
        Ok(())
    }

    /// Sums `count` f32 in place over the group.
    pub fn all_reduce_sum(&self, buf: Buf, count: usize, stream: u64) -> Result<(), RunError> {
        self.all_reduce_typed(buf, count, ncclDataType_t::ncclFloat32, stream)
    }

    /// Sums `count` elements of type `ty` in place over the group.
    pub fn all_reduce_typed(
        &self,
        buf: Buf,
        count: usize,
        ty: ncclDataType_t,
        stream: u64,
    ) -> Result<(), RunError> {
        // SAFETY: `buf` holds `count` elements of `ty` on this rank's GPU; the stream is
        // this rank's.
        let r = unsafe {
            nccl::all_reduce(
                buf.ptr as *const c_void,
                buf.ptr as *mut c_void,
                count,
                ty,
                ncclRedOp_t::ncclSum,
                self.raw,
                stream as _,
            )
        };
        self.queued(r, "all-reduce", stream, || {
            format!("all-reduce of {count} elements over the {}", self.name)
        })
    }

    /// `out` (count f32) = the sum over ranks of this rank's share of `inp` (count·size f32).
    pub fn reduce_scatter_sum(
        &self,
        inp: Buf,
        out: Buf,
        count: usize,
        stream: u64,
    ) -> Result<(), RunError> {
        self.reduce_scatter_typed(inp, out, count, ncclDataType_t::ncclFloat32, stream)
    }

    /// `out` (count elements of `ty`) = the sum over ranks of this rank's share of `inp`
    /// (count·size elements), shares in rank order.
    pub fn reduce_scatter_typed(
        &self,
        inp: Buf,
        out: Buf,
        count: usize,
        ty: ncclDataType_t,
        stream: u64,
    ) -> Result<(), RunError> {
        // SAFETY: sizes as documented, on this rank's GPU and stream.
        let r = unsafe {
            nccl::reduce_scatter(
                inp.ptr as *const c_void,
                out.ptr as *mut c_void,
                count,
                ty,
                ncclRedOp_t::ncclSum,
                self.raw,
                stream as _,
            )
        };
        self.queued(r, "reduce-scatter", stream, || {
            format!("reduce-scatter to {count} elements over the {}", self.name)
        })
    }

    /// `out` (count·size elements of `elem_bytes` each) = every rank's `inp` (count), in
    /// rank order. Moved as bytes: gathering does no arithmetic.
    pub fn all_gather(
        &self,
        inp: Buf,
        out: Buf,
        count: usize,
        elem_bytes: usize,
        stream: u64,
    ) -> Result<(), RunError> {
        // SAFETY: sizes as documented, on this rank's GPU and stream.
        let r = unsafe {
            nccl::all_gather(
                inp.ptr as *const c_void,
                out.ptr as *mut c_void,
                count * elem_bytes,
                ncclDataType_t::ncclUint8,
                self.raw,
                stream as _,
            )
        };
        self.queued(r, "all-gather", stream, || {
            format!(
                "all-gather of {count} elements a rank over the {}",
                self.name
            )
        })
    }

    /// Sends `count` elements of `ty` to group rank `peer` (pipeline messages; batched
    /// with the matching receives in one `grouped` call so neither side waits first).
    pub fn send(
        &self,
        buf: Buf,
        count: usize,
        ty: ncclDataType_t,
        peer: usize,
        stream: u64,
    ) -> Result<(), RunError> {
        // SAFETY: `buf` holds `count` elements of `ty` on this rank's GPU.
        let r = unsafe {
            nccl::send(
                buf.ptr as *const c_void,
                count,
                ty,
                peer as i32,
                self.raw,
                stream as _,
            )
        };
        self.queued(r, "send", stream, || {
            format!(
                "send of {count} elements to rank {peer} of the {}",
                self.name
            )
        })
    }

    /// Receives `count` elements of `ty` from group rank `peer` into `buf`.
    pub fn recv(
        &self,
        buf: Buf,
        count: usize,
        ty: ncclDataType_t,
        peer: usize,
        stream: u64,
    ) -> Result<(), RunError> {
        // SAFETY: `buf` has room for `count` elements of `ty` on this rank's GPU.
        let r = unsafe {
            nccl::recv(
                buf.ptr as *mut c_void,
                count,
                ty,
                peer as i32,
                self.raw,
                stream as _,
            )
        };
        self.queued(r, "receive", stream, || {
            format!(
                "receive of {count} elements from rank {peer} of the {}",
                self.name
            )
        })
    }

    /// Opens this group's send/receive connections both ways with its ring neighbours
    /// (group ranks ± 1), all members together; `scratch` holds 3 f32 (one sent, one
    /// received from each side). NCCL connects a direction on its first use, inside
    /// `ncclGroupEnd`, and returns only when the peer has connected too; mid-step that can
    /// deadlock: a pipeline stage that first receives from its successor in the group of a
    /// send to it (gpipe's last forward) waits in the group's end, its send not launched,
    /// while the successor's host waits on its stream for that very send (an upload from
    /// pageable memory may). Seen on 2 H200s with bf16 gpipe; with every direction open
    /// before the first step, no connection is made mid-step.
    pub fn connect_neighbours(&self, scratch: Buf, stream: u64) -> Result<(), RunError> {
        let (prev, next) = (
            (self.rank + self.size - 1) % self.size,
            (self.rank + 1) % self.size,
        );
        let peers = if prev == next {
            vec![(next, 2)]
        } else {
            vec![(prev, 1), (next, 2)]
        };
        let ty = ncclDataType_t::ncclFloat32;
        grouped(|| {
            for (peer, slot) in peers {
                self.send(scratch, 1, ty, peer, stream)?;
                self.recv(scratch.at(slot, 4), 1, ty, peer, stream)?;
            }
            Ok(())
        })
    }

    pub fn abort(&self) {
        // SAFETY: aborting is allowed at any time; the communicator is not used after.
        unsafe {
            let _ = nccl::comm_abort(self.raw);
        }
    }
}

/// How long a rank waits for the others to meet or for a collective before it gives up.
pub fn timeout() -> Duration {
    std::env::var("PLANC_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(300))
}

/// The tensor-parallel groups: consecutive ranks (tensor parallelism is innermost, inside
/// a node), in group-rank order.
pub fn tensor_parallel_groups(world: usize, tp: usize) -> Vec<Vec<usize>> {
    (0..world / tp)
        .map(|g| (0..tp).map(|t| g * tp + t).collect())
        .collect()
}

/// The pipeline groups: the ranks of one tensor- and data-parallel position, one per
/// stage, in stage order (group rank = pipeline rank).
pub fn pipeline_groups(world: usize, tp: usize, dp: usize) -> Vec<Vec<usize>> {
    let pp = world / (tp * dp);
    let mut groups = Vec::new();
    for d in 0..dp {
        for t in 0..tp {
            groups.push((0..pp).map(|p| t + tp * (d + dp * p)).collect());
        }
    }
    groups
}

/// The data-parallel groups: the ranks of one tensor and pipeline position, in group-rank
/// order; the unique id of group k of the list given to `communicators` is the k-th that
/// rank 0 sends.
pub fn data_parallel_groups(world: usize, tp: usize, dp: usize) -> Vec<Vec<usize>> {
    let pp = world / (tp * dp);
    let mut groups = Vec::new();
    for p in 0..pp {
        for t in 0..tp {
            groups.push((0..dp).map(|d| t + tp * (d + dp * p)).collect());
        }
    }
    groups
}

/// Meets the other ranks and makes the communicator of every group that holds this rank.
/// Rank 0 creates one NCCL id per group and hands every rank all of them (`rendezvous`).
///
/// `groups` are (kind, members); every rank walks them in the same order, so the blocking
/// initialisations of a rank's groups (one of each kind) meet without a cycle.
///
/// `fingerprint` says what this rank runs (planc's version, the plan's hash, the options
/// that change the program); a rank whose fingerprint differs from rank 0's is refused at
/// the rendezvous, before any NCCL call, instead of hanging in the first collective.
pub fn communicators(
    world: &World,
    groups: &[(&str, Vec<usize>)],
    fingerprint: &str,
) -> Result<Vec<Comm>, RunError> {
    // SAFETY: probes the shared library only.
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Err(RunError::Cuda(
            "NCCL (libnccl.so.2) not found; add it to LD_LIBRARY_PATH".into(),
        ));
    }
    let ids = if world.rank == 0 {
        groups
            .iter()
            .map(|_| {
                nccl::get_uniqueid()
                    .map(|id| id.internal.map(|c| c as u8))
                    .map_err(|e| nerr("unique id", e))
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    let ids = rendezvous(world, ids, groups.len(), fingerprint, timeout())?;
    let mut comms = Vec::new();
    for (k, (name, members)) in groups.iter().enumerate() {
        let Some(me) = members.iter().position(|&r| r == world.rank) else {
            continue;
        };
        let id = ncclUniqueId {
            internal: ids[k].map(|b| b as std::ffi::c_char),
        };
        let mut raw: ncclComm_t = std::ptr::null_mut();
        // SAFETY: every member calls this with the same id and group size.
        unsafe { nccl::comm_init_rank(&mut raw, members.len() as i32, id, me as i32) }
            .map_err(|e| nerr("init", e))?;
        comms.push(Comm {
            raw,
            rank: me,
            size: members.len(),
            name: format!(
                "{name} group of ranks {}",
                members
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        });
    }
    Ok(comms)
}

/// The TCP exchange: rank 0 listens on `world.master`, each other rank connects (retrying
/// until `limit`), sends its rank and its fingerprint, and receives `count` ids of 128
/// bytes, or, where its fingerprint is not rank 0's, a refusal that says both; rank 0
/// returns its own `ids`. A rank that never joins, a rank 0 that cannot be reached, or a
/// rank that runs something else is an error that names it, on both sides.
pub fn rendezvous(
    world: &World,
    ids: Vec<[u8; 128]>,
    count: usize,
    fingerprint: &str,
    limit: Duration,
) -> Result<Vec<[u8; 128]>, RunError> {
    let io = |e: std::io::Error| RunError::Cuda(format!("rendezvous: {e}"));
    let deadline = Instant::now() + limit;
    if world.rank == 0 {
        let listener = TcpListener::bind(&world.master).map_err(|e| {
            RunError::Plan(format!(
                "rank 0 cannot listen on {}: {e} (choose another --master port)",
                world.master
            ))
        })?;
        listener.set_nonblocking(true).map_err(io)?;
        let mut joined = vec![false; world.size];
        joined[0] = true;
        while joined.iter().any(|j| !j) {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).map_err(io)?;
                    s.set_read_timeout(Some(Duration::from_secs(10)))
                        .map_err(io)?;
                    let mut r = [0u8; 4];
                    if s.read_exact(&mut r).is_err() {
                        continue;
                    }
                    let r = u32::from_le_bytes(r) as usize;
                    if r == 0 || r >= world.size {
                        continue;
                    }
                    let Ok(theirs) = read_text(&mut s) else {
                        continue;
                    };
                    if theirs != fingerprint {
                        let why = format!(
                            "rank {r} runs {theirs}, rank 0 runs {fingerprint}: every node must \
                             run the same planc on the same plan with the same --steps and \
                             --layers (a rank running another program would hang in its \
                             first collective)"
                        );
                        let _ = s.write_all(&[1]).and_then(|_| write_text(&mut s, &why));
                        return Err(RunError::Plan(why));
                    }
                    s.write_all(&[0]).map_err(io)?;
                    for id in &ids {
                        s.write_all(id).map_err(io)?;
                    }
                    joined[r] = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        let missing: Vec<String> = joined
                            .iter()
                            .enumerate()
                            .filter(|(_, j)| !**j)
                            .map(|(r, _)| r.to_string())
                            .collect();
                        return Err(RunError::Plan(format!(
                            "rank 0 waited {limit:?} on {} for ranks {} to join; they never came \
                             (check --nnodes, --node-rank, --master on every node)",
                            world.master,
                            missing.join(", ")
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(io(e)),
            }
        }
        return Ok(ids);
    }
    let mut s = loop {
        match TcpStream::connect(&world.master) {
            Ok(s) => break s,
            Err(e) => {
                if Instant::now() > deadline {
                    return Err(RunError::Plan(format!(
                        "rank {} could not reach rank 0 at {} within {limit:?}: {e}",
                        world.rank, world.master
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    s.write_all(&(world.rank as u32).to_le_bytes())
        .map_err(io)?;
    write_text(&mut s, fingerprint).map_err(io)?;
    let hung_up = |e: std::io::Error| {
        RunError::Plan(format!(
            "rank {}: rank 0 hung up during the rendezvous: {e}",
            world.rank
        ))
    };
    let mut status = [0u8; 1];
    s.read_exact(&mut status).map_err(hung_up)?;
    if status[0] != 0 {
        return Err(RunError::Plan(read_text(&mut s).map_err(hung_up)?));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let mut b = [0u8; 128];
        s.read_exact(&mut b).map_err(|e| {
            RunError::Plan(format!(
                "rank {}: rank 0 hung up during the rendezvous: {e}",
                world.rank
            ))
        })?;
        out.push(b);
    }
    Ok(out)
}

/// The longest text the rendezvous reads (a fingerprint, a refusal): a peer that sends
/// more is not a planc rank.
const MAX_TEXT: usize = 4096;

fn write_text(s: &mut TcpStream, text: &str) -> std::io::Result<()> {
    let b = &text.as_bytes()[..text.len().min(MAX_TEXT)];
    s.write_all(&(b.len() as u32).to_le_bytes())?;
    s.write_all(b)
}

fn read_text(s: &mut TcpStream) -> std::io::Result<String> {
    let mut n = [0u8; 4];
    s.read_exact(&mut n)?;
    let n = u32::from_le_bytes(n) as usize;
    if n > MAX_TEXT {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a planc rank",
        ));
    }
    let mut b = vec![0u8; n];
    s.read_exact(&mut b)?;
    Ok(String::from_utf8_lossy(&b).into_owned())
}

/// Turns a wait past the timeout into an error. Two clocks: the main thread says what it
/// is about to wait in (`waiting`/`done`), and that a step has begun (`step`/`step_done`),
/// so a host stuck anywhere in a step (inside a CUDA call that waits for a stream held up
/// by a peer, say) is caught too, not only at the marked waits. Past the timeout the
/// watchdog prints what it waits in, aborts the communicators (which frees the stuck
/// collective) and ends the process.
pub struct Watchdog {
    state: Arc<WatchState>,
}

#[derive(Default)]
struct WatchState {
    what: Mutex<String>,
    /// Milliseconds since ORIGIN plus one when the wait began; 0: not waiting.
    since: AtomicU64,
    step: AtomicU64,
    step_since: AtomicU64,
    stop: AtomicBool,
}

impl WatchState {
    /// What the rank has waited in past `limit`, if anything. A marked wait, the more
    /// precise name, has its own clock and is judged alone; else the step's clock.
    fn overdue(&self, limit: Duration) -> Option<String> {
        let (since, step_since) = (
            self.since.load(Ordering::Relaxed),
            self.step_since.load(Ordering::Relaxed),
        );
        if since != 0 {
            if waited(since) <= limit {
                return None;
            }
            let what = self.what.lock().map(|w| w.clone()).unwrap_or_default();
            return Some(format!(
                "waited {:.0} s in {what}",
                waited(since).as_secs_f64()
            ));
        }
        (step_since != 0 && waited(step_since) > limit).then(|| {
            format!(
                "has been in step {} for {:.0} s",
                self.step.load(Ordering::Relaxed),
                waited(step_since).as_secs_f64()
            )
        })
    }
}

fn stamp() -> u64 {
    1 + ORIGIN.elapsed().as_millis() as u64
}

fn waited(since: u64) -> Duration {
    ORIGIN
        .elapsed()
        .saturating_sub(Duration::from_millis(since - 1))
}

impl Watchdog {
    pub fn start(rank: usize, comms: Vec<Arc<Comm>>) -> Watchdog {
        let state = Arc::new(WatchState::default());
        let s = state.clone();
        let limit = timeout();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            if s.stop.load(Ordering::Relaxed) {
                return;
            }
            let Some(what) = s.overdue(limit) else {
                continue;
            };
            // The host waits at a sync point; the GPU is further back, in the first
            // queued operation that has not finished.
            let gpu = trail::first_unfinished()
                .map(|op| format!("; its GPU is in operation {op}"))
                .unwrap_or_default();
            eprintln!(
                "error: rank {rank} {what}{gpu}; the other ranks of its groups did not join \
                 (a rank died or the ranks run different programs; PLANC_TIMEOUT_S sets the \
                 limit, {} s). Aborting the communicators.",
                limit.as_secs()
            );
            for c in &comms {
                c.abort();
            }
            std::process::exit(1);
        });
        Watchdog { state }
    }

    /// Marks the start of a wait in `what`.
    pub fn waiting(&self, what: String) {
        if let Ok(mut w) = self.state.what.lock() {
            *w = what;
        }
        self.state.since.store(stamp(), Ordering::Relaxed);
    }

    pub fn done(&self) {
        self.state.since.store(0, Ordering::Relaxed);
    }

    /// Marks the start of step `n` (counted from 1).
    pub fn step(&self, n: u64) {
        self.state.step.store(n, Ordering::Relaxed);
        self.state.step_since.store(stamp(), Ordering::Relaxed);
    }

    pub fn step_done(&self) {
        self.state.step_since.store(0, Ordering::Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
    }
}

static ORIGIN: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "planc 0.1.0, plan 1a2b, 20 steps";

    #[test]
    fn activations_travel_in_the_type_the_kernels_store_them_in() {
        let bytes = |t| match t {
            ncclDataType_t::ncclBfloat16 | ncclDataType_t::ncclFloat16 => 2,
            ncclDataType_t::ncclFloat32 => 4,
            other => panic!("{other:?}"),
        };
        for p in [
            Precision::Fp32,
            Precision::Bf16,
            Precision::Fp16,
            Precision::Fp8,
        ] {
            let storage = crate::device::cuda::storage_code(p);
            let want = if storage == 0 { 4 } else { 2 };
            assert_eq!(bytes(activation_type(p)), want, "{p:?}");
        }
        assert_eq!(
            activation_type(Precision::Fp8),
            ncclDataType_t::ncclBfloat16
        );
    }

    fn world(rank: usize, size: usize, port: u16) -> World {
        World {
            rank,
            size,
            local_rank: rank,
            master: format!("127.0.0.1:{port}"),
        }
    }

    /// Rank `rank` of `size` at the rendezvous on `port`.
    fn meet(
        rank: usize,
        size: usize,
        port: u16,
        ids: Vec<[u8; 128]>,
        count: usize,
        fingerprint: &str,
        limit: Duration,
    ) -> Result<Vec<[u8; 128]>, RunError> {
        rendezvous(&world(rank, size, port), ids, count, fingerprint, limit)
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn every_rank_receives_rank_zeros_ids() {
        let port = free_port();
        let ids: Vec<[u8; 128]> = (0..3u8).map(|k| [k + 7; 128]).collect();
        let expect = ids.clone();
        let others: Vec<_> = (1..4)
            .map(|r| {
                std::thread::spawn(move || {
                    meet(r, 4, port, Vec::new(), 3, FP, Duration::from_secs(20))
                })
            })
            .collect();
        let mine = meet(0, 4, port, ids, 3, FP, Duration::from_secs(20)).unwrap();
        assert_eq!(mine, expect);
        for t in others {
            assert_eq!(t.join().unwrap().unwrap(), expect);
        }
    }

    #[test]
    fn a_rank_that_runs_another_plan_is_refused_on_both_sides_before_any_collective() {
        let port = free_port();
        let one =
            std::thread::spawn(move || meet(1, 3, port, Vec::new(), 1, FP, Duration::from_secs(3)));
        let two = std::thread::spawn(move || {
            let other = "planc 0.1.0, plan 9f9f, 20 steps";
            meet(2, 3, port, Vec::new(), 1, other, Duration::from_secs(20))
        });
        let err = meet(0, 3, port, vec![[1; 128]], 1, FP, Duration::from_secs(20))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("rank 2 runs planc 0.1.0, plan 9f9f")
                && err.contains("rank 0 runs planc 0.1.0, plan 1a2b"),
            "{err}"
        );
        let err2 = two.join().unwrap().unwrap_err().to_string();
        assert_eq!(err2, err);
        // Rank 1 matched; it learns of the failure when rank 0 hangs up, if it had not
        // joined before the refusal, or later in NCCL's init otherwise: an error either way
        // or the ids.
        let _ = one.join().unwrap();
    }

    #[test]
    fn the_watchdog_names_a_marked_wait_first_and_else_the_step_past_the_limit() {
        let s = WatchState::default();
        let limit = Duration::from_millis(40);
        assert_eq!(s.overdue(limit), None, "idle");
        // In step 3, not yet past the limit; then past it.
        s.step.store(3, Ordering::Relaxed);
        s.step_since.store(stamp(), Ordering::Relaxed);
        assert_eq!(s.overdue(limit), None);
        std::thread::sleep(Duration::from_millis(60));
        let late = s.overdue(limit).expect("past the limit");
        assert!(late.starts_with("has been in step 3 for"), "{late}");
        // A marked wait that has just begun is judged on its own clock, not the step's.
        *s.what.lock().unwrap() = "the step-3 gradient reduction".into();
        s.since.store(stamp(), Ordering::Relaxed);
        assert_eq!(s.overdue(limit), None);
        std::thread::sleep(Duration::from_millis(60));
        let late = s.overdue(limit).expect("past the limit");
        assert!(
            late.starts_with("waited") && late.ends_with("in the step-3 gradient reduction"),
            "{late}"
        );
        // Done with both: nothing.
        s.since.store(0, Ordering::Relaxed);
        s.step_since.store(0, Ordering::Relaxed);
        assert_eq!(s.overdue(limit), None);
    }

    #[test]
    fn a_rank_that_never_joins_is_named() {
        let port = free_port();
        let one =
            std::thread::spawn(move || meet(1, 3, port, Vec::new(), 1, FP, Duration::from_secs(5)));
        let err = meet(0, 3, port, vec![[1; 128]], 1, FP, Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(err.contains("ranks 2 to join"), "{err}");
        assert!(one.join().unwrap().is_ok());
    }

    #[test]
    fn an_unreachable_rank_zero_is_named() {
        let port = free_port();
        let err = meet(2, 3, port, Vec::new(), 1, FP, Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(err.contains("rank 2 could not reach rank 0"), "{err}");
    }

    #[test]
    fn data_parallel_groups_hold_the_ranks_of_one_tensor_and_pipeline_position() {
        // tp 2, dp 2, pp 2: rank = tp_rank + 2·(dp_rank + 2·pp_rank).
        assert_eq!(
            data_parallel_groups(8, 2, 2),
            vec![vec![0, 2], vec![1, 3], vec![4, 6], vec![5, 7]]
        );
        assert_eq!(data_parallel_groups(2, 1, 2), vec![vec![0, 1]]);
        assert_eq!(
            tensor_parallel_groups(8, 2),
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]
        );
        assert_eq!(
            pipeline_groups(8, 2, 2),
            vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
        );
        // Each rank is in exactly one group of each kind.
        for r in 0..8 {
            let n = |gs: Vec<Vec<usize>>| gs.iter().filter(|g| g.contains(&r)).count();
            assert_eq!(n(tensor_parallel_groups(8, 2)), 1);
            assert_eq!(n(data_parallel_groups(8, 2, 2)), 1);
            assert_eq!(n(pipeline_groups(8, 2, 2)), 1);
        }
    }
}
