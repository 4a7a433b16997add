//! The thin CUDA layer the trainer stands on: one context and stream on a GPU, device
//! buffers that count the bytes they hold (the measured side of the memory plan), the
//! NVRTC-compiled kernels and their launches, and CUDA events for timing.
//!
//! Buffers are plain device pointers owned by [`Gpu`] and freed with it: the trainer
//! allocates its whole memory plan up front and never frees during a step, so there is
//! nothing for a borrow checker to protect and the launch arguments stay simple.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use planc_compiler::plan::Precision;

use super::signature::{self, Param};
use crate::error::RunError;

pub fn err(e: impl std::fmt::Debug) -> RunError {
    RunError::Cuda(format!("{e:?}"))
}

/// The kernels' source (`kernels.cu`, then fp8's casts in `fp8.cu`), for NVRTC.
pub const SOURCE: &str = concat!(
    include_str!("kernels.cu"),
    include_str!("fp8.cu"),
    include_str!("spin.cu")
);

/// The storage type of activations and compute weights: 0 fp32, 1 bf16, 2 fp16.
pub fn storage_code(p: Precision) -> u32 {
    match p {
        Precision::Fp32 => 0,
        Precision::Bf16 | Precision::Fp8 => 1,
        Precision::Fp16 => 2,
    }
}

/// Compiles the kernels for one precision to PTX. `arch` is e.g. `compute_90`; without one,
/// NVRTC's default. Needs only libnvrtc, no GPU: CI compiles every kernel this way.
pub fn compile(precision: Precision, arch: Option<&'static str>) -> Result<String, String> {
    let opts = CompileOptions {
        arch,
        options: vec![
            format!("-DPLANC_X={}", storage_code(precision)),
            "--std=c++17".into(),
        ],
        name: Some("kernels.cu".into()),
        ..Default::default()
    };
    compile_ptx_with_opts(SOURCE, opts)
        .map(|p| p.to_src())
        .map_err(|e| format!("{e}"))
}

/// `compile`, through a cache of PTX keyed by the source, precision, architecture and NVRTC
/// version: NVRTC takes about a second a start, and every rank of every run would pay it.
/// The cache is `$PLANC_CACHE_DIR`, else `$XDG_CACHE_HOME/planc/kernels`, else
/// `~/.cache/planc/kernels`; when it cannot be read or written, the kernels are compiled.
pub fn compile_cached(precision: Precision, arch: &'static str) -> Result<String, String> {
    match cache_dir() {
        Some(dir) => compile_cached_in(&dir, precision, arch),
        None => compile(precision, Some(arch)),
    }
}

fn cache_dir() -> Option<std::path::PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    env("PLANC_CACHE_DIR")
        .map(Into::into)
        .or_else(|| {
            env("XDG_CACHE_HOME").map(|d| std::path::PathBuf::from(d).join("planc/kernels"))
        })
        .or_else(|| env("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/planc/kernels")))
}

pub fn compile_cached_in(
    dir: &std::path::Path,
    precision: Precision,
    arch: &'static str,
) -> Result<String, String> {
    let bytes = cached_in(dir, precision, arch, "ptx", || {
        compile(precision, Some(arch)).map(String::into_bytes)
    })?;
    String::from_utf8(bytes).map_err(|e| format!("a cached PTX is not text: {e}"))
}

/// Compiles the kernels for one precision to machine code for the real architecture `sm`
/// (e.g. `sm_90`): what the driver otherwise compiles from the PTX in every process that
/// loads it (a few seconds for these kernels), unless its own cache has them.
pub fn compile_cubin(precision: Precision, sm: &str) -> Result<Vec<u8>, String> {
    use cudarc::nvrtc::{result, sys};
    let src = CString::new(SOURCE).map_err(|e| e.to_string())?;
    let prog = result::create_program(&src, Some(c"kernels.cu")).map_err(|e| format!("{e:?}"))?;
    let opts = [
        format!("--gpu-architecture={sm}"),
        format!("-DPLANC_X={}", storage_code(precision)),
        "--std=c++17".into(),
    ];
    // SAFETY: `prog` was created above and is destroyed once, at the end.
    let out = unsafe {
        match result::compile_program(prog, &opts) {
            Err(e) => {
                let log = result::get_program_log(prog)
                    .map(|l| {
                        let bytes: Vec<u8> = l.iter().map(|&c| c as u8).collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    })
                    .unwrap_or_default();
                Err(format!("{e:?}: {log}"))
            }
            Ok(()) => {
                let mut n = 0usize;
                sys::nvrtcGetCUBINSize(prog, &mut n)
                    .result()
                    .map_err(|e| format!("{e:?}"))
                    .and_then(|()| {
                        let mut buf = vec![0u8; n];
                        sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char)
                            .result()
                            .map(|()| buf)
                            .map_err(|e| format!("{e:?}"))
                    })
            }
        }
    };
    // SAFETY: created above, not destroyed before.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// [`compile_cubin`] through the same cache as the PTX.
pub fn compile_cubin_cached(precision: Precision, sm: &str) -> Result<Vec<u8>, String> {
    match cache_dir() {
        Some(dir) => cached_in(&dir, precision, sm, "cubin", || {
            compile_cubin(precision, sm)
        }),
        None => compile_cubin(precision, sm),
    }
}

/// What `compile` made of the source for (`precision`, `arch`), from `dir` where an earlier
/// run left it, keyed by the source, precision, architecture, NVRTC version and `ext`.
fn cached_in(
    dir: &std::path::Path,
    precision: Precision,
    arch: &str,
    ext: &str,
    compile: impl FnOnce() -> Result<Vec<u8>, String>,
) -> Result<Vec<u8>, String> {
    use sha2::{Digest, Sha256};
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints.
    unsafe {
        let _ = cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor);
    }
    let key: String = Sha256::digest(format!(
        "{SOURCE}\0{}\0{arch}\0{major}.{minor}",
        storage_code(precision)
    ))
    .iter()
    .map(|b| format!("{b:02x}"))
    .collect();
    let path = dir.join(format!("{key}.{ext}"));
    if let Ok(bytes) = std::fs::read(&path) {
        return Ok(bytes);
    }
    let bytes = compile()?;
    // Written whole or not at all: a temporary file renamed into place.
    let tmp = dir.join(format!(".{key}.{}.tmp", std::process::id()));
    if std::fs::create_dir_all(dir).is_ok() && std::fs::write(&tmp, &bytes).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
    Ok(bytes)
}

/// Every kernel `kernels.cu` defines, by name: loaded at start so a missing one fails
/// before training, not in the middle of a step.
pub const KERNELS: &[&str] = &[
    "spin",
    "cast_to_x",
    "add_x",
    "add_bias",
    "add_bias_residual",
    "embed_fwd",
    "embed_vocab_fwd",
    "add_positions",
    "embed_bwd_tokens",
    "embed_bwd_positions",
    "norm_fwd",
    "norm_bwd_input",
    "norm_bwd_params",
    "norm_fwd_v1",
    "norm_bwd_v1",
    "norm_fwd_v2",
    "norm_bwd_v2",
    "norm_fwd_v4",
    "norm_bwd_v4",
    "norm_fwd_w1",
    "norm_fwd_w2",
    "norm_fwd_w4",
    "norm_fwd_w8",
    "norm_fwd_w16",
    "sum_partials_2d",
    "colsum_partial",
    "colsum_partial_v",
    "sum_partials",
    "gelu_fwd",
    "gelu_bwd",
    "swiglu_fwd",
    "swiglu_bwd",
    "qkv_split",
    "qkv_merge_grad",
    "qkv_split_v",
    "qkv_merge_grad_v",
    "heads_merge",
    "heads_split",
    "softmax_causal_fwd",
    "softmax_causal_bwd",
    "flash_bwd_dot",
    "flash_fwd",
    "flash_bwd_dq",
    "flash_bwd_dkdv",
    "flash_fwd_tc32",
    "flash_bwd_dkdv_tc32",
    "flash_bwd_dq_tc32",
    "flash_fwd_tc64",
    "flash_bwd_dkdv_tc64",
    "flash_bwd_dq_tc64",
    "flash_fwd_tc128",
    "flash_bwd_dkdv_tc128",
    "flash_bwd_dq_tc128",
    "cross_entropy",
    "ce_stats",
    "ce_combine",
    "ce_grad",
    "sumsq_partial",
    "sum_partial",
    "adamw_flat",
    "sgd_flat",
    "fp8_cast_t",
    "fp8_scale_now",
    "fp8_roll",
];

/// A device buffer: a pointer and its size in bytes. Copy, because the GPU owns it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Buf {
    pub ptr: u64,
    pub bytes: usize,
}

impl Buf {
    pub const NULL: Buf = Buf { ptr: 0, bytes: 0 };

    /// The buffer from element `at` of `elem` bytes on.
    pub fn at(self, at: usize, elem: usize) -> Buf {
        let off = at * elem;
        debug_assert!(off <= self.bytes, "{off} > {}", self.bytes);
        Buf {
            ptr: self.ptr + off as u64,
            bytes: self.bytes.saturating_sub(off),
        }
    }
}

/// A kernel argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    P(Buf),
    I(i32),
    L(i64),
    F(f32),
}

/// Each kernel's declared parameters, read from [`SOURCE`] once a process and checked at
/// every launch.
fn signatures() -> &'static HashMap<&'static str, Vec<Param>> {
    static TABLE: std::sync::OnceLock<HashMap<&'static str, Vec<Param>>> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(|| signature::table(SOURCE, KERNELS))
}

impl Arg {
    /// The kind of parameter this argument passes, as `signature` reads declarations.
    pub fn param(&self) -> Param {
        match self {
            Arg::P(_) => Param::Ptr,
            Arg::I(_) => Param::I32,
            Arg::L(_) => Param::I64,
            Arg::F(_) => Param::F32,
        }
    }
}

/// The fewest bytes a buffer takes ([`Gpu::alloc`] rounds up to it; the memory plan's
/// figure, `planc_compiler::cost::buffers::launch`).
pub use planc_compiler::cost::buffers::launch::MIN_ALLOC;

/// What allocates device buffers: the GPU, or a [`Tally`] that records what would be
/// allocated without one (the memory plan's allocation, checked on the CPU).
pub trait Alloc {
    /// A zeroed buffer of `bytes` (at least [`MIN_ALLOC`]).
    fn alloc(&mut self, bytes: usize) -> Result<Buf, RunError>;
}

impl Alloc for Gpu {
    fn alloc(&mut self, bytes: usize) -> Result<Buf, RunError> {
        Gpu::alloc(self, bytes)
    }
}

/// Allocations recorded, not made: each request's bytes in order, and made-up addresses
/// (distinct, 256-byte aligned) for the handles built from them.
#[derive(Debug, Default)]
pub struct Tally {
    pub requests: Vec<usize>,
    next: u64,
}

impl Alloc for Tally {
    fn alloc(&mut self, bytes: usize) -> Result<Buf, RunError> {
        self.requests.push(bytes);
        let bytes = bytes.max(MIN_ALLOC);
        self.next += 1 << 40;
        Ok(Buf {
            ptr: self.next,
            bytes,
        })
    }
}

pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: sys::CUstream,
    /// Where collectives run, beside the compute stream (data-parallel reductions overlap
    /// the rest of backward).
    pub comm: sys::CUstream,
    pub name: String,
    pub ordinal: usize,
    /// Compute capability, major × 10 + minor (90: Hopper): which kernels this GPU runs.
    pub sm: u32,
    /// Bytes of one stored activation element in the precision the kernels were built for.
    pub xsz: usize,
    module: sys::CUmodule,
    functions: HashMap<&'static str, sys::CUfunction>,
    owned: Vec<Buf>,
    /// Bytes held in buffers now, and the most ever held: the memory plan, measured.
    pub held: usize,
    pub peak: usize,
}

impl Gpu {
    /// Opens GPU `ordinal`, compiles the kernels for `precision` and loads them.
    pub fn open(ordinal: usize, precision: Precision) -> Result<Gpu, RunError> {
        // SAFETY: only probes whether the shared libraries load.
        if !unsafe { sys::is_culib_present() } {
            return Err(RunError::NoDriver);
        }
        let count = CudaContext::device_count().map_err(err)? as usize;
        if count <= ordinal {
            return Err(RunError::NoGpu);
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(RunError::Cuda(
                "NVRTC (libnvrtc.so) not found; add the CUDA libraries to LD_LIBRARY_PATH".into(),
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(err)?;
        let name = ctx.name().map_err(err)?;
        let (major, minor) = (
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
                .map_err(err)?,
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
                .map_err(err)?,
        );
        ctx.bind_to_thread().map_err(err)?;
        // Machine code for this GPU where NVRTC makes it and the driver takes it; else PTX,
        // which the driver compiles on loading.
        let cubin = compile_cubin_cached(precision, &format!("sm_{major}{minor}"))
            .ok()
            .and_then(|image| {
                // SAFETY: the image is a CUBIN that lives through the call.
                unsafe { result::module::load_data(image.as_ptr() as *const c_void) }.ok()
            });
        let module = match cubin {
            Some(m) => m,
            None => {
                let arch: &'static str =
                    Box::leak(format!("compute_{major}{minor}").into_boxed_str());
                let ptx = compile_cached(precision, arch)
                    .map_err(|e| RunError::Cuda(format!("the kernels did not compile: {e}")))?;
                let image = CString::new(ptx).map_err(err)?;
                // SAFETY: the image is NUL-terminated PTX that lives through the call.
                unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
                    .map_err(err)?
            }
        };
        let smem_optin = ctx
            .attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )
            .map_err(err)?;
        let mut functions = HashMap::new();
        for &k in KERNELS {
            let cname = CString::new(k).expect("kernel names have no NUL");
            // SAFETY: the module is loaded and stays so while `self` lives.
            let f = unsafe { result::module::get_function(module, cname) }.map_err(err)?;
            if k.contains("_tc") {
                // The tensor-core attention kernels stage their tiles in more shared memory
                // than the 48 KiB a launch gets without asking.
                // SAFETY: a live function of the loaded module.
                unsafe {
                    result::function::set_function_attribute(
                        f,
                        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        smem_optin,
                    )
                }
                .map_err(err)?;
            }
            functions.insert(k, f);
        }
        let stream =
            result::stream::create(result::stream::StreamKind::NonBlocking).map_err(err)?;
        let comm = result::stream::create(result::stream::StreamKind::NonBlocking).map_err(err)?;
        Ok(Gpu {
            ctx,
            stream,
            comm,
            name,
            ordinal,
            sm: (major * 10 + minor) as u32,
            xsz: precision.bytes() as usize,
            module,
            functions,
            owned: Vec::new(),
            held: 0,
            peak: 0,
        })
    }

    /// A zeroed buffer of `bytes`, counted in the memory plan.
    pub fn alloc(&mut self, bytes: usize) -> Result<Buf, RunError> {
        let bytes = bytes.max(MIN_ALLOC);
        // SAFETY: a plain device allocation, freed in Drop.
        let ptr = unsafe { result::malloc_sync(bytes) }.map_err(|e| {
            RunError::Cuda(format!(
                "out of device memory allocating {:.2} GiB with {:.2} GiB already held ({e:?}): \
                 lower parallel.micro_batch, set parallel.recompute, or run fewer layers with \
                 --layers K",
                bytes as f64 / GIB,
                self.held as f64 / GIB
            ))
        })?;
        // SAFETY: the buffer was just allocated with this size.
        unsafe { result::memset_d8_sync(ptr, 0, bytes) }.map_err(err)?;
        let b = Buf { ptr, bytes };
        self.owned.push(b);
        self.held += bytes;
        self.peak = self.peak.max(self.held);
        Ok(b)
    }

    /// Frees a buffer from `alloc` (transient ones: checkpoint gathers).
    pub fn free(&mut self, b: Buf) -> Result<(), RunError> {
        if let Some(i) = self.owned.iter().position(|o| *o == b) {
            self.sync()?;
            // SAFETY: the buffer is ours and the stream is drained.
            unsafe { result::free_sync(b.ptr) }.map_err(err)?;
            self.owned.swap_remove(i);
            self.held -= b.bytes;
        }
        Ok(())
    }

    pub fn zero(&self, b: Buf) -> Result<(), RunError> {
        // SAFETY: `b` is a live buffer of this GPU.
        unsafe { result::memset_d8_async(b.ptr, 0, b.bytes, self.stream) }.map_err(err)
    }

    /// Copies host data into device buffers, queued on the stream: after the work queued
    /// before it (which may still read the buffers), before the work queued after. The
    /// host slices may be reused on return: copies from pageable memory are staged at once.
    pub fn upload<T: Copy>(&self, dst: Buf, src: &[T]) -> Result<(), RunError> {
        self.upload_all(&[(dst, src)])
    }

    pub fn upload_all<T: Copy>(&self, items: &[(Buf, &[T])]) -> Result<(), RunError> {
        for (dst, src) in items {
            assert!(std::mem::size_of_val(*src) <= dst.bytes, "upload overflows");
            // SAFETY: sizes checked; the driver stages pageable memory before returning,
            // and the stream orders the copy with the kernels around it.
            unsafe { result::memcpy_htod_async(dst.ptr, src, self.stream) }.map_err(err)?;
        }
        Ok(())
    }

    pub fn download<T: Copy + Default>(&self, src: Buf, n: usize) -> Result<Vec<T>, RunError> {
        let mut out = vec![T::default(); n];
        assert!(
            n * std::mem::size_of::<T>() <= src.bytes,
            "download overflows"
        );
        // SAFETY: sizes checked; the stream is drained first.
        unsafe {
            result::stream::synchronize(self.stream).map_err(err)?;
            result::memcpy_dtoh_sync(&mut out, src.ptr).map_err(err)?;
        }
        Ok(out)
    }

    pub fn copy(&self, dst: Buf, src: Buf, bytes: usize) -> Result<(), RunError> {
        assert!(bytes <= dst.bytes && bytes <= src.bytes, "copy overflows");
        // SAFETY: sizes checked.
        unsafe { result::memcpy_dtod_async(dst.ptr, src.ptr, bytes, self.stream) }.map_err(err)
    }

    pub fn sync(&self) -> Result<(), RunError> {
        // SAFETY: our own stream.
        unsafe { result::stream::synchronize(self.stream) }.map_err(err)
    }

    /// The board's PCI address as NVML names it (`probe::nvml`).
    pub fn pci_bus_id(&self) -> Result<String, RunError> {
        use sys::CUdevice_attribute as A;
        let at = |a| self.ctx.attribute(a).map_err(err);
        Ok(format!(
            "{:08x}:{:02x}:{:02x}.0",
            at(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            at(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            at(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?
        ))
    }

    /// Launches `kernel` on `grid` blocks of `block` threads.
    pub fn launch(
        &self,
        kernel: &str,
        grid: (u32, u32),
        block: u32,
        args: &[Arg],
    ) -> Result<(), RunError> {
        self.launch_smem(kernel, grid, block, 0, args)
    }

    /// Launches `kernel` with `smem` bytes of dynamic shared memory a block.
    pub fn launch_smem(
        &self,
        kernel: &str,
        grid: (u32, u32),
        block: u32,
        smem: u32,
        args: &[Arg],
    ) -> Result<(), RunError> {
        let f = *self
            .functions
            .get(kernel)
            .unwrap_or_else(|| panic!("kernel {kernel} is not in KERNELS"));
        let want = signatures().get(kernel).map(Vec::as_slice);
        signature::check(kernel, want, args.iter().map(Arg::param)).map_err(RunError::Cuda)?;
        let mut vals: Vec<[u8; 8]> = args
            .iter()
            .map(|a| match *a {
                Arg::P(b) => b.ptr.to_ne_bytes(),
                Arg::I(i) => {
                    let mut v = [0u8; 8];
                    v[..4].copy_from_slice(&i.to_ne_bytes());
                    v
                }
                Arg::L(l) => l.to_ne_bytes(),
                Arg::F(x) => {
                    let mut v = [0u8; 8];
                    v[..4].copy_from_slice(&x.to_ne_bytes());
                    v
                }
            })
            .collect();
        let mut params: Vec<*mut c_void> = vals
            .iter_mut()
            .map(|v| v.as_mut_ptr() as *mut c_void)
            .collect();
        // SAFETY: the arguments match the kernel's parameters in kernels.cu, in number and
        // width (`signature::check` above, from the source's declaration).
        unsafe {
            result::launch_kernel(
                f,
                grid.into_dim3(),
                (block, 1, 1),
                smem,
                self.stream,
                &mut params,
            )
        }
        .map_err(err)
    }

    /// Launches an elementwise kernel over `n` items.
    pub fn launch_n(&self, kernel: &str, n: usize, args: &[Arg]) -> Result<(), RunError> {
        let block = 256u32;
        let grid = n.div_ceil(block as usize).max(1) as u32;
        self.launch(kernel, (grid, 1), block, args)
    }

    /// Launches an elementwise kernel that moves 16 bytes (`VEC` elements) a thread over
    /// `n` elements: one thread per 16 bytes, not per element.
    pub fn launch_v(&self, kernel: &str, n: usize, args: &[Arg]) -> Result<(), RunError> {
        self.launch_n(kernel, n.div_ceil(16 / self.xsz), args)
    }

    pub fn event(&self) -> Result<Event, RunError> {
        let e = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(err)?;
        // SAFETY: a fresh event on our stream.
        unsafe { result::event::record(e, self.stream) }.map_err(err)?;
        Ok(Event(e))
    }

    /// The communication stream waits for what the compute stream has queued so far.
    pub fn comm_after_compute(&self) -> Result<(), RunError> {
        self.order(self.stream, self.comm)
    }

    /// The compute stream waits for what the communication stream has queued so far.
    pub fn compute_after_comm(&self) -> Result<(), RunError> {
        self.order(self.comm, self.stream)
    }

    /// Makes `later` wait for what `earlier` has queued so far (no host wait).
    fn order(&self, earlier: sys::CUstream, later: sys::CUstream) -> Result<(), RunError> {
        let e = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map_err(err)?;
        // SAFETY: both streams belong to this GPU; the event is destroyed once queued (CUDA
        // keeps it alive until the wait completes).
        unsafe {
            result::event::record(e, earlier).map_err(err)?;
            result::stream::wait_event(later, e, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
                .map_err(err)?;
            result::event::destroy(e).map_err(err)?;
        }
        Ok(())
    }

    pub fn sync_comm(&self) -> Result<(), RunError> {
        // SAFETY: our own stream.
        unsafe { result::stream::synchronize(self.comm) }.map_err(err)
    }

    /// Free and total device memory as the driver sees it.
    pub fn mem_info(&self) -> Result<(usize, usize), RunError> {
        result::mem_get_info().map_err(err)
    }
}

trait Dim3 {
    fn into_dim3(self) -> (u32, u32, u32);
}

impl Dim3 for (u32, u32) {
    fn into_dim3(self) -> (u32, u32, u32) {
        (self.0, self.1, 1)
    }
}

pub const GIB: f64 = (1u64 << 30) as f64;

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: everything here was created by this Gpu and is not used after.
        unsafe {
            let _ = result::stream::synchronize(self.stream);
            for b in self.owned.drain(..) {
                let _ = result::free_sync(b.ptr);
            }
            let _ = result::module::unload(self.module);
            let _ = result::stream::synchronize(self.comm);
            let _ = result::stream::destroy(self.stream);
            let _ = result::stream::destroy(self.comm);
        }
    }
}

/// A recorded CUDA event.
pub struct Event(sys::CUevent);

impl Event {
    /// Milliseconds from `self` to `later`, waiting for `later` to complete.
    pub fn ms_to(&self, later: &Event) -> Result<f32, RunError> {
        // SAFETY: both events were recorded on a live stream.
        unsafe {
            result::event::synchronize(later.0).map_err(err)?;
            result::event::elapsed(self.0, later.0).map_err(err)
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event is not used after.
        unsafe {
            let _ = result::event::destroy(self.0);
        }
    }
}
