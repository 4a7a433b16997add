//! cuDNN's backend API, as much of it as the attention graphs need: libcudnn opened at run
//! time, a handle on planc's stream, a [`Graph`] lowered to backend descriptors, the
//! engine configurations heuristics mode A proposes turned into an execution plan (the
//! first that finalizes, skipping non-deterministic engines when asked), and execution
//! with a variant pack.
//!
//! Every failure returns a sentence naming the step, cuDNN's status and its last error
//! message; building also records what heuristics proposed and why each configuration was
//! refused ([`PlanReport`]), so one run on a GPU says enough to fix a refusal.

use std::ffi::{c_char, c_void, CStr};
use std::sync::OnceLock;

use cudarc::cudnn::sys::{
    cudnnBackendAttributeName_t as A, cudnnBackendAttributeType_t as T,
    cudnnBackendDescriptorType_t as D, cudnnBackendHeurMode_t, cudnnBackendNumericalNote_t,
    cudnnDataType_t, cudnnPointwiseMode_t as P, cudnnReduceTensorOp_t,
};

use super::graph::{Dtype, Graph, Op, Pw, Red, Uid};

type Status = u32;
type Raw = *mut c_void;

/// The entry points of libcudnn planc calls, resolved once per process.
pub struct Lib {
    _lib: libloading::Library,
    /// What was opened (a file name the loader resolved, or `$PLANC_CUDNN`).
    pub path: String,
    /// cudnnGetVersion(): 91000 is 9.10.0.
    pub version: usize,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    last_error: Option<unsafe extern "C" fn(*mut c_char, usize)>,
    create: unsafe extern "C" fn(*mut Raw) -> Status,
    destroy: unsafe extern "C" fn(Raw) -> Status,
    set_stream: unsafe extern "C" fn(Raw, Raw) -> Status,
    create_desc: unsafe extern "C" fn(u32, *mut Raw) -> Status,
    destroy_desc: unsafe extern "C" fn(Raw) -> Status,
    set_attr: unsafe extern "C" fn(Raw, u32, u32, i64, *const c_void) -> Status,
    get_attr: unsafe extern "C" fn(Raw, u32, u32, i64, *mut i64, *mut c_void) -> Status,
    finalize: unsafe extern "C" fn(Raw) -> Status,
    execute: unsafe extern "C" fn(Raw, Raw, Raw) -> Status,
}

/// The oldest cuDNN planc builds graphs for: 9.0 (cudarc's enums are cuDNN 9's).
pub const MIN_VERSION: usize = 90000;

/// The library names tried, in order, after `$PLANC_CUDNN`.
pub const NAMES: &[&str] = &["libcudnn.so.9", "libcudnn.so"];

static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();

/// libcudnn, opened on first use; the reason it cannot be used otherwise.
pub fn lib() -> Result<&'static Lib, String> {
    LIB.get_or_init(open).as_ref().map_err(Clone::clone)
}

fn open() -> Result<Lib, String> {
    let mut names: Vec<String> = Vec::new();
    if let Some(p) = std::env::var_os("PLANC_CUDNN").filter(|p| !p.is_empty()) {
        names.push(p.to_string_lossy().into_owned());
    }
    names.extend(NAMES.iter().map(|s| s.to_string()));
    open_first(&names)
}

/// The first of `names` the dynamic loader opens, resolved; else why none could be used.
fn open_first(names: &[String]) -> Result<Lib, String> {
    let mut errors = Vec::new();
    for name in names {
        // SAFETY: loading cuDNN runs its initialisers, which only register its sub-libraries.
        match unsafe { libloading::Library::new(name) } {
            Ok(lib) => return resolve(lib, name),
            Err(e) => errors.push(format!("{e}")),
        }
    }
    Err(format!(
        "libcudnn cannot be loaded ({}); put cuDNN 9's library folder on LD_LIBRARY_PATH \
         (PyTorch's wheels have it in site-packages/nvidia/cudnn/lib) or name the file in \
         PLANC_CUDNN",
        errors.last().map_or("no name tried", String::as_str)
    ))
}

fn resolve(lib: libloading::Library, path: &str) -> Result<Lib, String> {
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the signature is cudnn.h's for this symbol, with enums as u32.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{path} has no {}: {e}", $name))?
        };
    }
    let get_version: unsafe extern "C" fn() -> usize = sym!("cudnnGetVersion");
    // SAFETY: takes nothing, returns a number.
    let version = unsafe { get_version() };
    if version < MIN_VERSION {
        return Err(format!(
            "{path} is cuDNN {}, planc's attention graphs need cuDNN 9 or newer",
            version_string(version)
        ));
    }
    // SAFETY: a void function of cudnn.h (9.0 and newer), looked up optionally.
    let last_error = unsafe { lib.get(b"cudnnGetLastErrorString\0") }
        .ok()
        .map(|s| *s);
    Ok(Lib {
        path: path.to_string(),
        version,
        error_string: sym!("cudnnGetErrorString"),
        last_error,
        create: sym!("cudnnCreate"),
        destroy: sym!("cudnnDestroy"),
        set_stream: sym!("cudnnSetStream"),
        create_desc: sym!("cudnnBackendCreateDescriptor"),
        destroy_desc: sym!("cudnnBackendDestroyDescriptor"),
        set_attr: sym!("cudnnBackendSetAttribute"),
        get_attr: sym!("cudnnBackendGetAttribute"),
        finalize: sym!("cudnnBackendFinalize"),
        execute: sym!("cudnnBackendExecute"),
        _lib: lib,
    })
}

/// 91000 → "9.10.0" (cuDNN 9 numbers versions major·10000 + minor·100 + patch).
pub fn version_string(v: usize) -> String {
    if v >= 90000 {
        format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, v / 100 % 10, v % 100)
    }
}

impl Lib {
    /// `Ok` for CUDNN_STATUS_SUCCESS, else what failed, cuDNN's name for the status and
    /// its last error message.
    fn check(&self, status: Status, what: impl FnOnce() -> String) -> Result<(), String> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: returns a static string for any status.
        let name = unsafe { CStr::from_ptr((self.error_string)(status)) }.to_string_lossy();
        let mut msg = format!("{}: {name} ({status})", what());
        if let Some(last) = self.last_error {
            let mut buf = [0 as c_char; 1024];
            // SAFETY: writes at most buf.len() bytes, NUL-terminated.
            unsafe { last(buf.as_mut_ptr(), buf.len()) };
            // SAFETY: NUL-terminated by cuDNN (or all zeros).
            let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
            if !text.trim().is_empty() {
                msg.push_str(&format!(": {}", text.trim()));
            }
        }
        Err(msg)
    }
}

/// A cuDNN handle whose work goes to one stream.
pub struct Handle {
    raw: Raw,
    lib: &'static Lib,
}

impl Handle {
    /// A handle on `gpu`'s compute stream; needs its context current on this thread.
    pub fn new(lib: &'static Lib, gpu: &crate::device::cuda::Gpu) -> Result<Handle, String> {
        let stream = gpu.stream as Raw;
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes one handle.
        lib.check(unsafe { (lib.create)(&mut raw) }, || "cudnnCreate".into())?;
        let h = Handle { raw, lib };
        // SAFETY: a live handle and a stream of the current context.
        lib.check(unsafe { (lib.set_stream)(raw, stream) }, || {
            "cudnnSetStream".into()
        })?;
        Ok(h)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe { (self.lib.destroy)(self.raw) };
    }
}

/// A backend descriptor, destroyed with the value.
pub struct Desc {
    raw: Raw,
    lib: &'static Lib,
}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by `Desc::new`, destroyed once.
        unsafe { (self.lib.destroy_desc)(self.raw) };
    }
}

impl Desc {
    fn new(lib: &'static Lib, kind: D) -> Result<Desc, String> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: writes one descriptor.
        lib.check(unsafe { (lib.create_desc)(kind as u32, &mut raw) }, || {
            format!("creating a {kind:?}")
        })?;
        Ok(Desc { raw, lib })
    }

    /// Sets `name` to `n` elements of type `ty` at `data`.
    fn set(&self, name: A, ty: T, n: usize, data: *const c_void) -> Result<(), String> {
        // SAFETY: `data` points at `n` elements of `ty`, as each caller below passes.
        let st = unsafe { (self.lib.set_attr)(self.raw, name as u32, ty as u32, n as i64, data) };
        self.lib.check(st, || format!("setting {name:?}"))
    }

    fn descs(&self, name: A, ds: &[&Desc]) -> Result<(), String> {
        let raws: Vec<Raw> = ds.iter().map(|d| d.raw).collect();
        self.set(
            name,
            T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            raws.len(),
            raws.as_ptr().cast(),
        )
    }

    fn i64s(&self, name: A, v: &[i64]) -> Result<(), String> {
        self.set(name, T::CUDNN_TYPE_INT64, v.len(), v.as_ptr().cast())
    }

    fn u32_of(&self, name: A, ty: T, v: u32) -> Result<(), String> {
        self.set(name, ty, 1, (&v as *const u32).cast())
    }

    fn dtype(&self, name: A, t: Dtype) -> Result<(), String> {
        self.u32_of(name, T::CUDNN_TYPE_DATA_TYPE, data_type(t) as u32)
    }

    fn flag(&self, name: A, v: bool) -> Result<(), String> {
        self.set(name, T::CUDNN_TYPE_BOOLEAN, 1, (&v as *const bool).cast())
    }

    fn f32_of(&self, name: A, v: f32) -> Result<(), String> {
        self.set(name, T::CUDNN_TYPE_FLOAT, 1, (&v as *const f32).cast())
    }

    fn finalize(&self, what: impl FnOnce() -> String) -> Result<(), String> {
        // SAFETY: a live descriptor.
        self.lib
            .check(unsafe { (self.lib.finalize)(self.raw) }, what)
    }

    /// Up to `cap` elements of `name` (u32-sized enums or i64), and how many there were.
    fn get<E: Copy + Default>(&self, name: A, ty: T, cap: usize) -> Result<Vec<E>, String> {
        let mut out = vec![E::default(); cap];
        let mut n = 0i64;
        // SAFETY: `out` holds `cap` elements of the type `ty` names.
        let st = unsafe {
            (self.lib.get_attr)(
                self.raw,
                name as u32,
                ty as u32,
                cap as i64,
                &mut n,
                out.as_mut_ptr().cast(),
            )
        };
        self.lib.check(st, || format!("reading {name:?}"))?;
        out.truncate(n.clamp(0, cap as i64) as usize);
        Ok(out)
    }
}

fn data_type(t: Dtype) -> cudnnDataType_t {
    match t {
        Dtype::F32 => cudnnDataType_t::CUDNN_DATA_FLOAT,
        Dtype::Bf16 => cudnnDataType_t::CUDNN_DATA_BFLOAT16,
        Dtype::F16 => cudnnDataType_t::CUDNN_DATA_HALF,
        Dtype::I32 => cudnnDataType_t::CUDNN_DATA_INT32,
        Dtype::Bool => cudnnDataType_t::CUDNN_DATA_BOOLEAN,
    }
}

fn pointwise_mode(m: Pw) -> P {
    match m {
        Pw::Mul => P::CUDNN_POINTWISE_MUL,
        Pw::Sub => P::CUDNN_POINTWISE_SUB,
        Pw::Add => P::CUDNN_POINTWISE_ADD,
        Pw::Div => P::CUDNN_POINTWISE_DIV,
        Pw::Exp => P::CUDNN_POINTWISE_EXP,
        Pw::Log => P::CUDNN_POINTWISE_LOG,
        Pw::Identity => P::CUDNN_POINTWISE_IDENTITY,
        Pw::GenIndex(_) => P::CUDNN_POINTWISE_GEN_INDEX,
        Pw::CmpGe => P::CUDNN_POINTWISE_CMP_GE,
        Pw::BinarySelect => P::CUDNN_POINTWISE_BINARY_SELECT,
    }
}

fn reduce_op(m: Red) -> cudnnReduceTensorOp_t {
    match m {
        Red::Add => cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_ADD,
        Red::Max => cudnnReduceTensorOp_t::CUDNN_REDUCE_TENSOR_MAX,
    }
}

/// What building a plan found: for the GPU checks' printout and for errors.
#[derive(Clone, Debug, Default)]
pub struct PlanReport {
    /// Engine configurations heuristics proposed (mode A, then the fallback list when
    /// none of A's finalized).
    pub proposed: usize,
    /// Each configuration tried: the engine's global index and why it was not taken
    /// (None: taken).
    pub tried: Vec<(i64, Option<String>)>,
    /// The engine taken, its numerical notes (cuDNN's names) and its workspace in bytes.
    pub engine: i64,
    pub notes: Vec<String>,
    pub workspace: usize,
}

impl std::fmt::Display for PlanReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} engine configurations proposed; engine {} taken (notes: {}), workspace {} bytes",
            self.proposed,
            self.engine,
            if self.notes.is_empty() {
                "none".into()
            } else {
                self.notes.join(", ")
            },
            self.workspace
        )?;
        for (e, why) in self.tried.iter().filter(|(_, w)| w.is_some()) {
            write!(
                f,
                "\n    engine {e} refused: {}",
                why.as_deref().unwrap_or("")
            )?;
        }
        Ok(())
    }
}

/// A graph lowered to cuDNN and planned: every descriptor kept alive while the plan is.
pub struct Plan {
    plan: Desc,
    _graph: Desc,
    _keep: Vec<Desc>,
    pub report: PlanReport,
}

/// Lowers `g` and plans it on `handle`'s device. `deterministic` refuses engines whose
/// numerical notes say NONDETERMINISTIC. On failure the message says which step refused
/// and, past heuristics, every configuration tried.
pub fn plan(handle: &Handle, g: &Graph, deterministic: bool) -> Result<Plan, String> {
    let lib = handle.lib;
    let mut keep = Vec::new();
    let mut tensors = std::collections::HashMap::new();
    for t in &g.tensors {
        tensors.insert(
            t.uid,
            tensor(lib, t).map_err(|e| format!("tensor {} ({}): {e}", t.uid, t.name))?,
        );
    }
    let mut ops = Vec::new();
    for (i, op) in g.ops.iter().enumerate() {
        let (d, aux) = operation(lib, op, &tensors).map_err(|e| format!("op {i} ({op:?}): {e}"))?;
        keep.extend(aux);
        ops.push(d);
    }
    let graph = Desc::new(lib, D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
    graph.descs(
        A::CUDNN_ATTR_OPERATIONGRAPH_OPS,
        &ops.iter().collect::<Vec<_>>(),
    )?;
    graph.set(
        A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
        T::CUDNN_TYPE_HANDLE,
        1,
        (&handle.raw as *const Raw).cast(),
    )?;
    graph.finalize(|| "finalizing the operation graph (cuDNN does not take this graph)".into())?;
    keep.extend(tensors.into_values());
    keep.extend(ops);

    let mut report = PlanReport::default();
    for mode in [
        cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A,
        cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK,
    ] {
        // A mode that proposes nothing (or refuses the graph) leaves the next one to try.
        let configs = match heuristics(lib, &graph, mode) {
            Ok(c) => c,
            Err(e) => {
                report.tried.push((-1, Some(e)));
                continue;
            }
        };
        report.proposed += configs.len();
        for cfg in configs {
            let (engine, notes) = engine_of(lib, &cfg).unwrap_or((-1, Vec::new()));
            if deterministic && notes.iter().any(|n| n == "NONDETERMINISTIC") {
                report
                    .tried
                    .push((engine, Some("non-deterministic".into())));
                continue;
            }
            let plan = Desc::new(lib, D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
            let built = plan
                .set(
                    A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                    T::CUDNN_TYPE_HANDLE,
                    1,
                    (&handle.raw as *const Raw).cast(),
                )
                .and_then(|()| plan.descs(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[&cfg]))
                .and_then(|()| plan.finalize(|| "finalizing the plan".into()))
                .and_then(|()| {
                    plan.get::<i64>(
                        A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                        T::CUDNN_TYPE_INT64,
                        1,
                    )
                });
            match built {
                Ok(ws) => {
                    report.tried.push((engine, None));
                    report.engine = engine;
                    report.notes = notes;
                    report.workspace = ws.first().copied().unwrap_or(0).max(0) as usize;
                    keep.push(cfg);
                    return Ok(Plan {
                        plan,
                        _graph: graph,
                        _keep: keep,
                        report,
                    });
                }
                Err(e) => report.tried.push((engine, Some(e))),
            }
        }
    }
    Err(format!("no engine runs this graph: {report}"))
}

/// The engine configurations heuristics `mode` proposes, best first.
fn heuristics(
    lib: &'static Lib,
    graph: &Desc,
    mode: cudnnBackendHeurMode_t,
) -> Result<Vec<Desc>, String> {
    let heur = Desc::new(lib, D::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
    heur.descs(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[graph])?;
    heur.u32_of(
        A::CUDNN_ATTR_ENGINEHEUR_MODE,
        T::CUDNN_TYPE_HEUR_MODE,
        mode as u32,
    )?;
    heur.finalize(|| format!("heuristics {mode:?}"))?;
    let mut count = 0i64;
    // SAFETY: asks for the number of results only.
    let st = unsafe {
        (lib.get_attr)(
            heur.raw,
            A::CUDNN_ATTR_ENGINEHEUR_RESULTS as u32,
            T::CUDNN_TYPE_BACKEND_DESCRIPTOR as u32,
            0,
            &mut count,
            std::ptr::null_mut(),
        )
    };
    lib.check(st, || format!("counting {mode:?}'s results"))?;
    let configs = (0..count.max(0))
        .map(|_| Desc::new(lib, D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
        .collect::<Result<Vec<_>, _>>()?;
    let mut raws: Vec<Raw> = configs.iter().map(|c| c.raw).collect();
    let mut got = 0i64;
    // SAFETY: `raws` holds `count` created engine-configuration descriptors to fill.
    let st = unsafe {
        (lib.get_attr)(
            heur.raw,
            A::CUDNN_ATTR_ENGINEHEUR_RESULTS as u32,
            T::CUDNN_TYPE_BACKEND_DESCRIPTOR as u32,
            count,
            &mut got,
            raws.as_mut_ptr().cast(),
        )
    };
    lib.check(st, || format!("reading {mode:?}'s results"))?;
    let mut configs = configs;
    configs.truncate(got.clamp(0, count) as usize);
    Ok(configs)
}

/// The engine of a configuration: its global index and numerical notes.
fn engine_of(lib: &'static Lib, cfg: &Desc) -> Result<(i64, Vec<String>), String> {
    let engine = Desc::new(lib, D::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
    let mut raw = engine.raw;
    let mut n = 0i64;
    // SAFETY: fills one created engine descriptor.
    let st = unsafe {
        (lib.get_attr)(
            cfg.raw,
            A::CUDNN_ATTR_ENGINECFG_ENGINE as u32,
            T::CUDNN_TYPE_BACKEND_DESCRIPTOR as u32,
            1,
            &mut n,
            (&mut raw as *mut Raw).cast(),
        )
    };
    lib.check(st, || "reading a configuration's engine".into())?;
    let index = engine
        .get::<i64>(A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX, T::CUDNN_TYPE_INT64, 1)?
        .first()
        .copied()
        .unwrap_or(-1);
    let cap = cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_TYPE_COUNT as usize;
    let notes = engine
        .get::<u32>(
            A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
            T::CUDNN_TYPE_NUMERICAL_NOTE,
            cap,
        )?
        .into_iter()
        .map(note_name)
        .collect();
    Ok((index, notes))
}

fn note_name(n: u32) -> String {
    use cudnnBackendNumericalNote_t as N;
    let known = [
        (N::CUDNN_NUMERICAL_NOTE_TENSOR_CORE, "TENSOR_CORE"),
        (
            N::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS,
            "DOWN_CONVERT_INPUTS",
        ),
        (
            N::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION,
            "REDUCED_PRECISION_REDUCTION",
        ),
        (N::CUDNN_NUMERICAL_NOTE_FFT, "FFT"),
        (N::CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, "NONDETERMINISTIC"),
        (N::CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP, "STRICT_NAN_PROP"),
    ];
    known
        .iter()
        .find(|(k, _)| *k as u32 == n)
        .map_or_else(|| format!("note {n}"), |(_, s)| s.to_string())
}

fn tensor(lib: &'static Lib, t: &super::graph::Tensor) -> Result<Desc, String> {
    let d = Desc::new(lib, D::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    d.dtype(A::CUDNN_ATTR_TENSOR_DATA_TYPE, t.dtype)?;
    d.i64s(A::CUDNN_ATTR_TENSOR_DIMENSIONS, &t.dims)?;
    d.i64s(A::CUDNN_ATTR_TENSOR_STRIDES, &t.strides)?;
    d.i64s(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[t.uid])?;
    // 16 bytes: what the tensor-core engines need, and what planc's buffers give.
    d.i64s(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[16])?;
    if t.is_virtual {
        d.flag(A::CUDNN_ATTR_TENSOR_IS_VIRTUAL, true)?;
    }
    if t.by_value {
        d.flag(A::CUDNN_ATTR_TENSOR_IS_BY_VALUE, true)?;
    }
    d.finalize(|| "finalizing".into())?;
    Ok(d)
}

/// One operation's descriptor and the descriptors it refers to (kept alive beside it).
fn operation(
    lib: &'static Lib,
    op: &Op,
    tensors: &std::collections::HashMap<Uid, Desc>,
) -> Result<(Desc, Vec<Desc>), String> {
    let t = |u: Uid| {
        tensors
            .get(&u)
            .ok_or_else(|| format!("uid {u} is not a tensor"))
    };
    match *op {
        Op::Matmul { a, b, c } => {
            let desc = Desc::new(lib, D::CUDNN_BACKEND_MATMUL_DESCRIPTOR)?;
            desc.dtype(A::CUDNN_ATTR_MATMUL_COMP_TYPE, Dtype::F32)?;
            desc.finalize(|| "finalizing the matmul descriptor".into())?;
            let o = Desc::new(lib, D::CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)?;
            o.descs(A::CUDNN_ATTR_OPERATION_MATMUL_ADESC, &[t(a)?])?;
            o.descs(A::CUDNN_ATTR_OPERATION_MATMUL_BDESC, &[t(b)?])?;
            o.descs(A::CUDNN_ATTR_OPERATION_MATMUL_CDESC, &[t(c)?])?;
            o.descs(A::CUDNN_ATTR_OPERATION_MATMUL_DESC, &[&desc])?;
            o.finalize(|| "finalizing".into())?;
            Ok((o, vec![desc]))
        }
        Op::Pointwise {
            mode,
            prec,
            x,
            b,
            t: sel,
            y,
        } => {
            let desc = Desc::new(lib, D::CUDNN_BACKEND_POINTWISE_DESCRIPTOR)?;
            desc.u32_of(
                A::CUDNN_ATTR_POINTWISE_MODE,
                T::CUDNN_TYPE_POINTWISE_MODE,
                pointwise_mode(mode) as u32,
            )?;
            desc.dtype(A::CUDNN_ATTR_POINTWISE_MATH_PREC, prec)?;
            if let Pw::GenIndex(axis) = mode {
                desc.i64s(A::CUDNN_ATTR_POINTWISE_AXIS, &[axis])?;
            }
            desc.finalize(|| "finalizing the pointwise descriptor".into())?;
            let o = Desc::new(lib, D::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)?;
            o.descs(A::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &[&desc])?;
            o.descs(A::CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &[t(x)?])?;
            if let Some(b) = b {
                o.descs(A::CUDNN_ATTR_OPERATION_POINTWISE_BDESC, &[t(b)?])?;
            }
            if let Some(sel) = sel {
                o.descs(A::CUDNN_ATTR_OPERATION_POINTWISE_TDESC, &[t(sel)?])?;
            }
            o.descs(A::CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &[t(y)?])?;
            o.f32_of(A::CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, 1.0)?;
            o.f32_of(A::CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, 1.0)?;
            o.finalize(|| "finalizing".into())?;
            Ok((o, vec![desc]))
        }
        Op::Reduction { mode, x, y } => {
            let desc = Desc::new(lib, D::CUDNN_BACKEND_REDUCTION_DESCRIPTOR)?;
            desc.dtype(A::CUDNN_ATTR_REDUCTION_COMP_TYPE, Dtype::F32)?;
            desc.u32_of(
                A::CUDNN_ATTR_REDUCTION_OPERATOR,
                T::CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
                reduce_op(mode) as u32,
            )?;
            desc.finalize(|| "finalizing the reduction descriptor".into())?;
            let o = Desc::new(lib, D::CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)?;
            o.descs(A::CUDNN_ATTR_OPERATION_REDUCTION_DESC, &[&desc])?;
            o.descs(A::CUDNN_ATTR_OPERATION_REDUCTION_XDESC, &[t(x)?])?;
            o.descs(A::CUDNN_ATTR_OPERATION_REDUCTION_YDESC, &[t(y)?])?;
            o.finalize(|| "finalizing".into())?;
            Ok((o, vec![desc]))
        }
        Op::Reshape { x, y } => {
            let o = Desc::new(lib, D::CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)?;
            o.descs(A::CUDNN_ATTR_OPERATION_RESHAPE_XDESC, &[t(x)?])?;
            o.descs(A::CUDNN_ATTR_OPERATION_RESHAPE_YDESC, &[t(y)?])?;
            o.finalize(|| "finalizing".into())?;
            Ok((o, Vec::new()))
        }
    }
}

/// A data pointer of the variant pack: device memory, or a host scalar passed by value.
pub type Pointer = *mut c_void;

impl Plan {
    /// Queues the plan on the handle's stream with `uids[i]` at `ptrs[i]` and `workspace`
    /// (at least `report.workspace` bytes of device memory).
    pub fn execute(
        &self,
        handle: &Handle,
        uids: &[Uid],
        ptrs: &[Pointer],
        workspace: Pointer,
    ) -> Result<(), String> {
        debug_assert_eq!(uids.len(), ptrs.len());
        let lib = handle.lib;
        let pack = Desc::new(lib, D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        pack.i64s(A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)?;
        pack.set(
            A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
            T::CUDNN_TYPE_VOID_PTR,
            ptrs.len(),
            ptrs.as_ptr().cast(),
        )?;
        pack.set(
            A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
            T::CUDNN_TYPE_VOID_PTR,
            1,
            (&workspace as *const Pointer).cast(),
        )?;
        pack.finalize(|| "finalizing the variant pack".into())?;
        // SAFETY: the plan was built on this handle; every pointer is live for the call
        // (device buffers for the kernels' lifetime, host scalars read while queuing).
        let st = unsafe { (lib.execute)(handle.raw, self.plan.raw, pack.raw) };
        lib.check(st, || "cudnnBackendExecute".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_that_cannot_be_opened_is_a_sentence_saying_what_to_set() {
        let e = open_first(&["/nonexistent/libcudnn.so.9".into()])
            .err()
            .expect("no such file");
        assert!(e.contains("/nonexistent/libcudnn.so.9"), "{e}");
        assert!(
            e.contains("LD_LIBRARY_PATH") && e.contains("PLANC_CUDNN"),
            "{e}"
        );
        let e = open_first(&[]).err().expect("nothing to open");
        assert!(e.contains("no name tried"), "{e}");
    }

    #[test]
    fn numerical_notes_are_named_as_cudnn_names_them() {
        let nd = cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC as u32;
        assert_eq!(note_name(nd), "NONDETERMINISTIC");
        assert_eq!(note_name(99), "note 99");
    }
}
