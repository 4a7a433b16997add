//! CUDA graphs: a stretch of stream work recorded once and replayed with one launch.
//!
//! A small model's step is hundreds of short kernels; launched one by one, the host's
//! launch cost (a few microseconds each) exceeds some kernels' run time and the GPU waits
//! for the host. Recorded into a graph, the same kernels with the same arguments run in
//! the same order from one launch, so replaying changes nothing numerically, only who
//! waits.
//!
//! Recording is stream capture in thread-local mode: nothing runs while recording, and any
//! call from this thread that cannot be recorded (a host wait, an allocation, a copy from
//! pageable host memory) fails and invalidates the capture instead of silently running
//! outside it; other threads (the watchdog) are unaffected. What the recorded work reads
//! must therefore sit in device buffers that outlive the graph, filled before each replay.

use cudarc::driver::{result, sys};

use super::cuda::err;
use crate::error::RunError;

/// An instantiated graph, destroyed with this value.
pub struct Graph {
    exec: sys::CUgraphExec,
}

impl Graph {
    /// Records what `record` queues on `stream` (a `Gpu`'s, as a number like NCCL's
    /// calls take it; nothing runs) and instantiates it. Where the work cannot be recorded,
    /// the reason: `record`'s own error or the driver's, with the stream out of capture
    /// again and nothing queued on it.
    pub fn capture(
        stream: u64,
        record: impl FnOnce() -> Result<(), RunError>,
    ) -> Result<Graph, String> {
        let stream = stream as sys::CUstream;
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        // SAFETY: `stream` is a live stream of the current context, not capturing.
        unsafe { result::stream::begin_capture(stream, mode) }
            .map_err(|e| format!("cuStreamBeginCapture: {e:?}"))?;
        let recorded = record();
        // Always ended, even after a failure: the stream leaves capture mode only here.
        // SAFETY: the stream is capturing (begun above).
        let ended = unsafe { result::stream::end_capture(stream) };
        let graph = match (recorded, ended) {
            (Ok(()), Ok(g)) if !g.is_null() => g,
            (Err(e), ended) => {
                destroy_graph(ended);
                return Err(e.to_string());
            }
            (Ok(()), Ok(_)) => return Err("the capture recorded no graph".into()),
            (Ok(()), Err(e)) => return Err(format!("cuStreamEndCapture: {e:?}")),
        };
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is the graph just captured; flags 0 is a plain instantiation.
        let made = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) }.result();
        destroy_graph(Ok(graph));
        match made {
            Ok(()) if !exec.is_null() => Ok(Graph { exec }),
            Ok(()) => Err("cuGraphInstantiate made no executable graph".into()),
            Err(e) => Err(format!("cuGraphInstantiate: {e:?}")),
        }
    }

    /// Queues one replay on `stream` (a `Gpu`'s), after the work queued before it.
    pub fn launch(&self, stream: u64) -> Result<(), RunError> {
        let stream = stream as sys::CUstream;
        // SAFETY: `exec` is a live executable graph of the current context.
        unsafe { result::graph::launch(self.exec, stream) }.map_err(err)
    }
}

/// The captured graph, once instantiated (its executable copy is independent of it).
fn destroy_graph(g: Result<sys::CUgraph, cudarc::driver::DriverError>) {
    if let Ok(g) = g {
        if !g.is_null() {
            // SAFETY: a graph from cuStreamEndCapture, destroyed once.
            let _ = unsafe { result::graph::destroy(g) };
        }
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: created by `capture`, not used after; a replay still running keeps its
        // resources until it completes (the driver defers the release).
        let _ = unsafe { result::graph::exec_destroy(self.exec) };
    }
}
