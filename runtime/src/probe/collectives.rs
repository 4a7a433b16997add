//! The plan's in-layer collectives (tensor- and context-parallel all-gathers,
//! reduce-scatters, all-reduces) and pipeline send/receive run with NCCL across the local
//! GPUs, one thread driving
//! every GPU through a NCCL group call, timed with CUDA events on each GPU's stream (the
//! slowest rank's time is the collective's).
//!
//! A group larger than the machine runs over the GPUs there are, and is predicted for that
//! many, so the comparison stays like for like; the report says so.

use std::sync::Arc;

use cudarc::cublas::{CudaBlas, Gemm};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use cudarc::nccl::{group_end, group_start, Comm, ReduceOp};
use half::bf16;
use planc_compiler::cost::comm::{collective_time, Collective, GroupShape};
use planc_compiler::cost::ops::Group;
use planc_compiler::cost::time::placement;
use planc_compiler::plan::Plan;
use planc_compiler::profile::OverlapPoint;

use crate::error::RunError;

fn cuda(e: impl std::fmt::Debug) -> RunError {
    RunError::Cuda(format!("{e:?}"))
}

/// A send and a receive buffer on one GPU.
type Pair = (CudaSlice<bf16>, CudaSlice<bf16>);

pub struct Collectives {
    streams: Vec<Arc<CudaStream>>,
    comms: Vec<Comm>,
}

impl Collectives {
    /// NCCL over the first `n` GPUs, or None where there are fewer than two or no NCCL.
    pub fn open(n: usize) -> Result<Option<Collectives>, RunError> {
        let available = CudaContext::device_count().map_err(cuda)? as usize;
        let n = n.min(available);
        // SAFETY: only probes whether the shared library loads.
        if n < 2 || !unsafe { cudarc::nccl::sys::is_culib_present() } {
            return Ok(None);
        }
        let streams: Vec<Arc<CudaStream>> = (0..n)
            .map(|i| CudaContext::new(i).map(|c| c.default_stream()))
            .collect::<Result<_, _>>()
            .map_err(cuda)?;
        let comms = Comm::from_devices(streams.clone()).map_err(cuda)?;
        Ok(Some(Collectives { streams, comms }))
    }

    pub fn size(&self) -> usize {
        self.comms.len()
    }

    /// Median seconds of `op` over a buffer of `bytes` (the full, unsharded buffer).
    pub fn time(&self, op: Collective, bytes: f64, repeats: usize) -> Result<f64, RunError> {
        let mut bufs = self.buffers_for(op, bytes)?;
        self.timed(repeats, || self.launch(op, &mut bufs))
    }

    /// The send and receive buffers of `op` over a full buffer of `bytes` (bf16 elements,
    /// divisible by the group size).
    fn buffers_for(&self, op: Collective, bytes: f64) -> Result<Vec<Pair>, RunError> {
        let n = self.size();
        let full = ((bytes / 2.0) as usize / n).max(1) * n;
        let (send_len, recv_len) = match op {
            Collective::AllReduce | Collective::AllToAll => (full, full),
            Collective::AllGather => (full / n, full),
            Collective::ReduceScatter => (full, full / n),
        };
        self.buffers(send_len, recv_len)
    }

    /// Queues `op` on every GPU's stream as one NCCL group.
    fn launch(&self, op: Collective, bufs: &mut [Pair]) -> Result<(), RunError> {
        group_start().map_err(cuda)?;
        for (comm, (send, recv)) in self.comms.iter().zip(bufs.iter_mut()) {
            match op {
                Collective::AllReduce | Collective::AllToAll => {
                    comm.all_reduce(send, recv, &ReduceOp::Sum).map_err(cuda)?
                }
                Collective::AllGather => comm.all_gather(send, recv).map_err(cuda)?,
                Collective::ReduceScatter => comm
                    .reduce_scatter(send, recv, &ReduceOp::Sum)
                    .map_err(cuda)?,
            };
        }
        group_end().map(|_| ()).map_err(cuda)
    }

    /// Median seconds for every GPU to send `bytes` to the next and receive as much from the
    /// one before (nccl-tests' sendrecv): a pipeline transfer between neighbouring stages.
    pub fn time_send_recv(&self, bytes: f64, repeats: usize) -> Result<f64, RunError> {
        let n = self.size();
        let len = ((bytes / 2.0) as usize).max(1);
        let mut bufs = self.buffers(len, len)?;
        self.timed(repeats, || {
            group_start().map_err(cuda)?;
            for (r, (comm, (send, recv))) in self.comms.iter().zip(bufs.iter_mut()).enumerate() {
                comm.send(send, ((r + 1) % n) as i32).map_err(cuda)?;
                comm.recv(recv, ((r + n - 1) % n) as i32).map_err(cuda)?;
            }
            group_end().map(|_| ()).map_err(cuda)
        })
    }

    /// Matrix products of `m×n×k` (bf16) on every GPU, timed alone and with one `op` over
    /// `bytes` issued on the GPUs' other stream just after them, as a data-parallel
    /// reduction is issued once a layer's backward ends and the next layer's products are
    /// already queued: NCCL's kernels then wait for SMs the products hold and stretch over
    /// them, which a collective queued first (holding its SMs from the start) does not
    /// show. On two H200s, collectives queued first cost the products 15 % of their rate
    /// while running; issued this way, GPT-2's per-layer reductions cost its next products
    /// about half the reduction's own time. Medians; the slowest GPU's time.
    pub fn time_beside_products(
        &self,
        op: Collective,
        bytes: f64,
        (m, n, k): (usize, usize, usize),
        repeats: usize,
    ) -> Result<OverlapPoint, RunError> {
        // A chain long enough to time well (a few milliseconds at Hopper rates).
        const PRODUCTS: usize = 8;
        let collective_alone_s = self.time(op, bytes, repeats)?;
        // The products run on a stream of their own: NCCL's here run on each context's
        // default (legacy) stream, which a non-blocking stream does not wait for.
        let mut gemms = Vec::new();
        for s in &self.streams {
            let ps = s.context().new_stream().map_err(cuda)?;
            let blas = CudaBlas::new(ps.clone()).map_err(|e| RunError::Cuda(e.to_string()))?;
            let host = |len: usize, salt: usize| -> Vec<bf16> {
                (0..len)
                    .map(|i| bf16::from_f32((((i + salt) % 241) as f32 - 120.0) / 120.0))
                    .collect()
            };
            let a = ps.memcpy_stod(&host(m * k, 1)).map_err(cuda)?;
            let b = ps.memcpy_stod(&host(k * n, 7)).map_err(cuda)?;
            let c = ps.alloc_zeros::<bf16>(m * n).map_err(cuda)?;
            gemms.push((ps, blas, a, b, c));
        }
        let cfg = super::gpu::config(m, n, k, bf16::from_f32);
        let products = |gemms: &mut Vec<_>| -> Result<(), RunError> {
            for (_, blas, a, b, c) in gemms.iter_mut() {
                let (blas, a, b, c): (
                    &CudaBlas,
                    &CudaSlice<bf16>,
                    &CudaSlice<bf16>,
                    &mut CudaSlice<bf16>,
                ) = (blas, a, b, c);
                for _ in 0..PRODUCTS {
                    // SAFETY: the buffers hold m×k, k×n and m×n elements, as `cfg` says.
                    unsafe { blas.gemm(cfg, a, b, c) }
                        .map_err(|e| RunError::Cuda(e.to_string()))?;
                }
            }
            Ok(())
        };
        let streams: Vec<Arc<CudaStream>> = gemms.iter().map(|g| g.0.clone()).collect();
        let span = |on: &[Arc<CudaStream>]| -> Result<Vec<_>, RunError> {
            on.iter()
                .map(|s| {
                    let e = s
                        .context()
                        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                        .map_err(cuda)?;
                    e.record(s).map_err(cuda)?;
                    Ok(e)
                })
                .collect()
        };
        let slowest = |starts: &[cudarc::driver::CudaEvent],
                       ends: &[cudarc::driver::CudaEvent]|
         -> Result<f64, RunError> {
            let mut t = 0.0f64;
            for (a, b) in starts.iter().zip(ends) {
                b.synchronize().map_err(cuda)?;
                t = t.max(a.elapsed_ms(b).map_err(cuda)? as f64 / 1e3);
            }
            Ok(t)
        };
        // Alone.
        products(&mut gemms)?;
        let mut alone = Vec::new();
        for _ in 0..repeats {
            let s0 = span(&streams)?;
            products(&mut gemms)?;
            let s1 = span(&streams)?;
            alone.push(slowest(&s0, &s1)?);
        }
        alone.sort_by(f64::total_cmp);
        let products_alone_s = alone[alone.len() / 2];
        // Beside: the products queued first, then one collective on the other stream.
        let mut bufs = self.buffers_for(op, bytes)?;
        let (mut beside, mut coll) = (Vec::new(), Vec::new());
        for _ in 0..repeats {
            let s0 = span(&streams)?;
            products(&mut gemms)?;
            let c0 = span(&self.streams)?;
            self.launch(op, &mut bufs)?;
            let c1 = span(&self.streams)?;
            let s1 = span(&streams)?;
            beside.push(slowest(&s0, &s1)?);
            coll.push(slowest(&c0, &c1)?);
        }
        beside.sort_by(f64::total_cmp);
        coll.sort_by(f64::total_cmp);
        Ok(OverlapPoint {
            op: format!("{op:?}"),
            gpus: self.size(),
            bytes: bytes as usize,
            m,
            n,
            k,
            products_alone_s,
            products_beside_s: beside[beside.len() / 2],
            collective_alone_s,
            collective_beside_s: coll[coll.len() / 2],
        })
    }

    /// A send and a receive buffer of bf16 on every GPU.
    fn buffers(&self, send_len: usize, recv_len: usize) -> Result<Vec<Pair>, RunError> {
        let host: Vec<bf16> = (0..send_len)
            .map(|i| bf16::from_f32(((i % 251) as f32 - 125.0) / 125.0))
            .collect();
        let mut bufs = Vec::new();
        for s in &self.streams {
            let send = s.memcpy_stod(&host).map_err(cuda)?;
            let recv = s.alloc_zeros::<bf16>(recv_len).map_err(cuda)?;
            bufs.push((send, recv));
        }
        Ok(bufs)
    }

    /// Median seconds of `launch` (one operation queued on every GPU's stream) after two
    /// warm-up launches; a repeat takes the slowest GPU's time.
    fn timed(
        &self,
        repeats: usize,
        mut launch: impl FnMut() -> Result<(), RunError>,
    ) -> Result<f64, RunError> {
        for _ in 0..2 {
            launch()?;
        }
        for s in &self.streams {
            s.synchronize().map_err(cuda)?;
        }
        let mut times = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let mut marks = Vec::new();
            for s in &self.streams {
                let start = s
                    .context()
                    .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(cuda)?;
                start.record(s).map_err(cuda)?;
                marks.push(start);
            }
            launch()?;
            let mut slowest = 0.0f64;
            for (s, start) in self.streams.iter().zip(&marks) {
                let end = s
                    .context()
                    .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(cuda)?;
                end.record(s).map_err(cuda)?;
                end.synchronize().map_err(cuda)?;
                slowest = slowest.max(start.elapsed_ms(&end).map_err(cuda)? as f64 / 1e3);
            }
            times.push(slowest);
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    }
}

/// The plan's own size of the group a collective runs over.
pub fn group_size(plan: &Plan, group: Group) -> u64 {
    match group {
        Group::Tp => plan.parallel.tp,
        Group::Cp => plan.parallel.cp,
        Group::Ep => plan.parallel.ep,
    }
}

/// What the model predicts for `op` over `n` GPUs of one node of the plan's first group.
pub fn predict(plan: &Plan, op: Collective, bytes: f64, n: usize) -> f64 {
    let pl = placement(plan, &plan.cluster.groups[0]);
    let shape = GroupShape {
        size: n as u64,
        per_node: n as u64,
    };
    collective_time(op, bytes, shape, &pl.fabric)
}
