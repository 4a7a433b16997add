//! On a GPU that multiplies in fp8 (Ada, Hopper): `precision = fp8`'s products
//! (`device::fp8`). The cast kernel bit for bit against the host's rounding (E4M3 and E5M2,
//! saturation, the transposed copy, the amax); a linear layer's forward, input gradient and
//! weight gradient (accumulated into fp32) against a float64 reference of the same fp8
//! values (tight: the layouts and scales) and of the bf16 inputs (within fp8's expected
//! error, and above bf16's: the products did run in fp8); the delayed scales from the amax
//! history over steps. Prints an fp8 product's time beside bf16's (run with --nocapture).
//! Without such a GPU it prints SKIPPED and passes.

use half::bf16;
use planc_compiler::plan::Precision;
use planc_runtime::device::blas::Blas;
use planc_runtime::device::cuda::{Buf, Gpu};
use planc_runtime::device::fp8::{self, Format, Fp8, AMAX_HISTORY};

mod common;

use common::{gpu_or_skip, Rng};

/// `n` values from `rng` (uniform in [-scale, scale)), rounded to bf16.
fn bf16s(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    rng.vec(n, scale, 0.0)
        .into_iter()
        .map(|x| bf16::from_f32(x).to_f32())
        .collect()
}

fn upload_bf16(gpu: &mut Gpu, v: &[f32]) -> Buf {
    let b = gpu.alloc(v.len() * 2).unwrap();
    let bits: Vec<u16> = v.iter().map(|&x| bf16::from_f32(x).to_bits()).collect();
    gpu.upload(b, &bits).unwrap();
    b
}

fn download_bf16(gpu: &Gpu, b: Buf, n: usize) -> Vec<f32> {
    gpu.download::<u16>(b, n)
        .unwrap()
        .into_iter()
        .map(|x| bf16::from_bits(x).to_f32())
        .collect()
}

/// An fp8 byte's value.
fn decode(format: Format, b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let (exp, mant, mbits, bias) = match format {
        Format::E4m3 => (((b >> 3) & 0xf) as i32, (b & 7) as f32, 3, 7),
        Format::E5m2 => (((b >> 2) & 0x1f) as i32, (b & 3) as f32, 2, 15),
    };
    let frac = mant / (1 << mbits) as f32;
    if format == Format::E4m3 && exp == 15 && mant == 7.0 {
        return f32::NAN;
    }
    if format == Format::E5m2 && exp == 31 {
        return if mant == 0.0 {
            sign * f32::INFINITY
        } else {
            f32::NAN
        };
    }
    sign * if exp == 0 {
        frac * 2f32.powi(1 - bias)
    } else {
        (1.0 + frac) * 2f32.powi(exp - bias)
    }
}

fn open() -> Option<Gpu> {
    gpu_or_skip("fp8 test", Precision::Fp8)
}

/// Whether this GPU multiplies in fp8; prints why not.
fn runs_fp8(gpu: &Gpu) -> bool {
    use cudarc::driver::sys::CUdevice_attribute as A;
    let major = gpu
        .ctx
        .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        .unwrap();
    let minor = gpu
        .ctx
        .attribute(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        .unwrap();
    let ok = fp8::device_runs_fp8(major, minor);
    if !ok {
        println!(
            "SKIPPED fp8 test: {} is {major}.{minor}, fp8 needs 8.9+",
            gpu.name
        );
    }
    ok
}

/// `‖a − b‖ / ‖b‖`.
fn rel(a: &[f64], b: &[f64]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum();
    let n: f64 = b.iter().map(|y| y * y).sum();
    (d / n).sqrt()
}

/// `c[r, q] = Σ_k a[r, k] · b[q, k]` in float64 (`a [rows, k]`, `b [cols, k]`).
fn abt(a: &[f64], b: &[f64], rows: usize, cols: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; rows * cols];
    for r in 0..rows {
        for q in 0..cols {
            c[r * cols + q] = (0..k).map(|j| a[r * k + j] * b[q * k + j]).sum();
        }
    }
    c
}

fn transpose(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let mut t = vec![0.0; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = a[r * cols + c];
        }
    }
    t
}

#[test]
fn the_cast_rounds_saturates_transposes_and_takes_the_amax() {
    let Some(mut gpu) = open() else { return };
    if !runs_fp8(&gpu) {
        return;
    }
    // Neither dimension a multiple of the kernel's 64-wide tile: the edge tiles too; the
    // second shape's rows span two blocks of four tiles (the second partial), and its
    // extremes sit in the last block, whose amax must reach the tensor's.
    let mut rng = Rng(7);
    for ((rows, cols), (format, scale)) in
        [(80usize, 48usize), (336, 80)]
            .into_iter()
            .flat_map(|shape| {
                [
                    (shape, (Format::E4m3, 37.0f32)),
                    (shape, (Format::E5m2, 3000.0)),
                ]
            })
    {
        let at = |i: usize| if rows > 256 { rows * cols - 1 - i } else { i };
        let mut x = bf16s(&mut rng, rows * cols, 4.0);
        // Past the largest value once scaled: saturates, not infinite.
        x[at(5)] = bf16::from_f32(format.max() / scale * 3.0).to_f32();
        x[at(6)] = -x[at(5)];
        // Below the smallest subnormal once scaled: zero.
        x[at(7)] = bf16::from_f32(1e-9).to_f32();
        let xb = upload_bf16(&mut gpu, &x);
        let meta = gpu.alloc(16).unwrap();
        gpu.upload(meta, &[1.0 / scale, scale, 0.0, format.max()])
            .unwrap();
        let (q, qt) = (
            gpu.alloc(rows * cols).unwrap(),
            gpu.alloc(rows * cols).unwrap(),
        );
        fp8::cast(&gpu, meta, format, xb, (rows, cols), (q, qt), false).unwrap();
        let qv: Vec<u8> = gpu.download(q, rows * cols).unwrap();
        let qtv: Vec<u8> = gpu.download(qt, rows * cols).unwrap();
        for r in 0..rows {
            for c in 0..cols {
                let want = fp8::quantize(format, x[r * cols + c] * scale);
                let got = decode(format, qv[r * cols + c]);
                assert_eq!(
                    got,
                    want,
                    "{format:?} {rows}x{cols} [{r}, {c}] of {}",
                    x[r * cols + c]
                );
                assert_eq!(qtv[c * rows + r], qv[r * cols + c], "transposed [{c}, {r}]");
            }
        }
        assert_eq!(decode(format, qv[at(5)]), format.max());
        assert_eq!(decode(format, qv[at(6)]), -format.max());
        assert_eq!(decode(format, qv[at(7)]), 0.0);
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let state: Vec<f32> = gpu.download(meta, 4).unwrap();
        assert_eq!(state[2], amax, "{format:?} {rows}x{cols} amax");
        // A tensor's first cast (no history) scales from its own amax: the largest value
        // lands on the format's largest.
        gpu.upload(meta, &fp8::fresh_meta(format)).unwrap();
        fp8::cast(&gpu, meta, format, xb, (rows, cols), (q, Buf::NULL), true).unwrap();
        let state: Vec<f32> = gpu.download(meta, 4).unwrap();
        assert_eq!(state[1], format.max() / amax);
        assert_eq!(state[0], 1.0 / state[1]);
        let qv: Vec<u8> = gpu.download(q, rows * cols).unwrap();
        let top = qv
            .iter()
            .map(|&b| decode(format, b).abs())
            .fold(0.0f32, f32::max);
        assert_eq!(top, format.max());
    }
}

/// One fp8 linear layer's forward and backward: y, dx, dw and the scales of x, w and dy
/// (what the casts multiplied by, and the inverse the products multiplied by).
struct Pass {
    y: Vec<f32>,
    dx: Vec<f32>,
    dw: Vec<f32>,
    scale: [f32; 3],
    inv: [f32; 3],
}

struct Layer {
    fp8: Fp8,
    lin: fp8::Linear,
    w: Buf,
    x: Buf,
    dy: Buf,
    y: Buf,
    dx: Buf,
    dw: Buf,
    rows: usize,
}

impl Layer {
    fn new(gpu: &mut Gpu, rows: usize, i: usize, o: usize) -> Layer {
        let (fp8, lins) = Fp8::new(gpu, &[(i, o)], rows).unwrap();
        Layer {
            fp8,
            lin: lins[0],
            w: gpu.alloc(o * i * 2).unwrap(),
            x: gpu.alloc(rows * i * 2).unwrap(),
            dy: gpu.alloc(rows * o * 2).unwrap(),
            y: gpu.alloc(rows * o * 2).unwrap(),
            dx: gpu.alloc(rows * i * 2).unwrap(),
            dw: gpu.alloc(o * i * 4).unwrap(),
            rows,
        }
    }

    /// A step: the weights cast, forward and backward of `x` with output gradient `dy`,
    /// the weight gradient accumulated onto `dw0`.
    fn step(&mut self, gpu: &Gpu, w: &[f32], x: &[f32], dy: &[f32], dw0: &[f32]) -> Pass {
        let bits =
            |v: &[f32]| -> Vec<u16> { v.iter().map(|&x| bf16::from_f32(x).to_bits()).collect() };
        gpu.upload(self.w, &bits(w)).unwrap();
        gpu.upload(self.x, &bits(x)).unwrap();
        gpu.upload(self.dy, &bits(dy)).unwrap();
        gpu.upload(self.dw, dw0).unwrap();
        self.fp8.begin_step(gpu, &[(self.lin, self.w)]).unwrap();
        let (l, rows) = (self.lin, self.rows);
        self.fp8.forward(gpu, &l, self.y, self.x, rows).unwrap();
        self.fp8
            .backward(gpu, &l, self.dx, self.dw, self.dy, self.x, rows, true)
            .unwrap();
        let s = self.fp8.scales(gpu).unwrap();
        Pass {
            y: download_bf16(gpu, self.y, rows * l.o),
            dx: download_bf16(gpu, self.dx, rows * l.i),
            dw: gpu.download(self.dw, l.o * l.i).unwrap(),
            scale: [s[0][1], s[1][1], s[2][1]],
            inv: [s[0][0], s[1][0], s[2][0]],
        }
    }
}

#[test]
fn an_fp8_linear_layer_matches_float64_within_fp8s_error() {
    let Some(mut gpu) = open() else { return };
    if !runs_fp8(&gpu) {
        return;
    }
    let (rows, i, o) = (272usize, 320usize, 208usize);
    let mut rng = Rng(11);
    let x = bf16s(&mut rng, rows * i, 2.0);
    let w = bf16s(&mut rng, o * i, 0.05);
    let dy = bf16s(&mut rng, rows * o, 1e-4);
    let dw0 = bf16s(&mut rng, o * i, 1e-3);
    let mut layer = Layer::new(&mut gpu, rows, i, o);
    let p = layer.step(&gpu, &w, &x, &dy, &dw0);
    let f64s = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
    // The fp8 values the products read: each tensor scaled, rounded, scaled back.
    let fp8_of = |v: &[f32], format: Format, k: usize| -> Vec<f64> {
        v.iter()
            .map(|&a| fp8::quantize(format, a * p.scale[k]) as f64 * p.inv[k] as f64)
            .collect()
    };
    let (xq, wq, dyq) = (
        fp8_of(&x, Format::E4m3, 0),
        fp8_of(&w, Format::E4m3, 1),
        fp8_of(&dy, Format::E5m2, 2),
    );
    let (xf, wf, dyf) = (f64s(&x), f64s(&w), f64s(&dy));
    // Reference products: y = x·Wᵀ, dx = dy·W, dW = dw0 + dyᵀ·x.
    let fwd = |x: &[f64], w: &[f64]| abt(x, w, rows, o, i);
    let dgrad = |dy: &[f64], w: &[f64]| abt(dy, &transpose(w, o, i), rows, i, o);
    let wgrad = |dy: &[f64], x: &[f64]| -> Vec<f64> {
        abt(&transpose(dy, rows, o), &transpose(x, rows, i), o, i, rows)
            .iter()
            .zip(&dw0)
            .map(|(g, &a)| g + a as f64)
            .collect()
    };
    let got = (f64s(&p.y), f64s(&p.dx), f64s(&p.dw));
    // Against the same fp8 values: only the accumulation and the bf16 output round.
    let exact = [
        ("forward", rel(&got.0, &fwd(&xq, &wq))),
        ("input gradient", rel(&got.1, &dgrad(&dyq, &wq))),
        ("weight gradient", rel(&got.2, &wgrad(&dyq, &xq))),
    ];
    // Against the bf16 inputs: fp8's own error (relative rounding error ~2.5 % RMS in
    // E4M3, ~5 % in E5M2, for each operand), and well above bf16's (~0.3 %).
    let true_ = [
        ("forward", rel(&got.0, &fwd(&xf, &wf)), 0.06),
        ("input gradient", rel(&got.1, &dgrad(&dyf, &wf)), 0.09),
        ("weight gradient", rel(&got.2, &wgrad(&dyf, &xf)), 0.09),
    ];
    println!(
        "fp8 linear {rows}x{i}->{o}: against the fp8 operands {exact:?}, against bf16 {true_:?}"
    );
    for (what, e) in exact {
        assert!(e < 5e-3, "{what}: {e} from the product of the fp8 operands");
    }
    for (what, e, tol) in true_ {
        assert!(e < tol, "{what}: {e} from float64, more than fp8's {tol}");
    }
    // The weight gradient's error counts dw0 too; the forward's is the products' alone.
    assert!(true_[0].1 > 0.01, "forward {}: not fp8's error", true_[0].1);
    assert!(
        true_[1].1 > 0.01,
        "input gradient {}: not fp8's error",
        true_[1].1
    );
    // The scales of a first step are the tensors' own: max / amax.
    let amax = |v: &[f32]| v.iter().fold(0.0f32, |m, a| m.max(a.abs()));
    assert_eq!(p.scale[0], 448.0 / amax(&x));
    assert_eq!(p.scale[1], 448.0 / amax(&w));
    assert_eq!(p.scale[2], 57344.0 / amax(&dy));
    assert_eq!(p.inv[0], 1.0 / p.scale[0]);
}

#[test]
fn the_scales_follow_the_largest_amax_of_the_history() {
    let Some(mut gpu) = open() else { return };
    if !runs_fp8(&gpu) {
        return;
    }
    let (rows, i, o) = (64usize, 64usize, 32usize);
    let mut rng = Rng(3);
    let x = bf16s(&mut rng, rows * i, 1.0);
    let w = bf16s(&mut rng, o * i, 0.1);
    let dy = bf16s(&mut rng, rows * o, 1e-3);
    let zero = vec![0.0f32; o * i];
    let mut layer = Layer::new(&mut gpu, rows, i, o);
    let amax = |v: &[f32]| v.iter().fold(0.0f32, |m, a| m.max(a.abs()));
    let scaled = |v: &[f32], k: f32| v.iter().map(|a| a * k).collect::<Vec<f32>>();
    let scales = |layer: &Layer, gpu: &Gpu| -> Vec<f32> {
        layer
            .fp8
            .scales(gpu)
            .unwrap()
            .iter()
            .map(|s| s[1])
            .collect()
    };
    // Step 1 scales from its own amaxes; step 2 from step 1's history.
    layer.step(&gpu, &w, &x, &dy, &zero);
    let s1 = scales(&layer, &gpu);
    layer.step(&gpu, &w, &scaled(&x, 4.0), &dy, &zero);
    let s2 = scales(&layer, &gpu);
    assert_eq!(s1, s2, "step 2 scales from step 1's amaxes");
    // Step 3 sees step 2's four-times larger input.
    layer.step(&gpu, &w, &scaled(&x, 0.25), &scaled(&dy, 0.5), &zero);
    let s3 = scales(&layer, &gpu);
    assert_eq!(s3[0], 448.0 / (4.0 * amax(&x)));
    assert_eq!(s3[2], s1[2]);
    // Step 4: the largest amax in the window still rules though the latest is smaller.
    layer.step(&gpu, &w, &x, &dy, &zero);
    let s4 = scales(&layer, &gpu);
    assert_eq!(s4[0], s3[0]);
    assert_eq!(s4[1], 448.0 / amax(&w));
    assert_eq!(s4[2], 57344.0 / amax(&dy));
    // Once the spike leaves the window (AMAX_HISTORY steps later) the scale recovers.
    for _ in 0..AMAX_HISTORY {
        layer.fp8.begin_step(&gpu, &[(layer.lin, layer.w)]).unwrap();
        let (l, r) = (layer.lin, layer.rows);
        layer.fp8.forward(&gpu, &l, layer.y, layer.x, r).unwrap();
    }
    let s5 = scales(&layer, &gpu);
    assert_eq!(s5[0], 448.0 / amax(&x), "the window moved past step 2");
}

#[test]
fn an_fp8_product_against_bf16_at_a_large_shape() {
    let Some(mut gpu) = open() else { return };
    if !runs_fp8(&gpu) {
        return;
    }
    let (rows, i, o) = (8192usize, 8192usize, 8192usize);
    let mut rng = Rng(5);
    let x = upload_bf16(&mut gpu, &bf16s(&mut rng, rows * i, 1.0));
    let w = upload_bf16(&mut gpu, &bf16s(&mut rng, o * i, 0.02));
    let y = gpu.alloc(rows * o * 2).unwrap();
    let (mut fp8, lins) = Fp8::new(&mut gpu, &[(i, o)], rows).unwrap();
    fp8.begin_step(&gpu, &[(lins[0], w)]).unwrap();
    let blas = Blas::new(&gpu, Precision::Bf16).unwrap();
    let time = |f: &dyn Fn()| {
        f();
        let e0 = gpu.event().unwrap();
        for _ in 0..20 {
            f();
        }
        let e1 = gpu.event().unwrap();
        e0.ms_to(&e1).unwrap() as f64 / 20.0
    };
    let flops = 2.0 * (rows * i * o) as f64;
    let bf = time(&|| blas.linear(y, x, w, rows, i, o).unwrap());
    let f8 = time(&|| fp8.forward(&gpu, &lins[0], y, x, rows).unwrap());
    println!(
        "{rows}x{i}x{o} on {}: bf16 {:.0} TFLOP/s, fp8 (its input's cast included) {:.0} TFLOP/s, {:.2}x",
        gpu.name,
        flops / bf / 1e9,
        flops / f8 / 1e9,
        bf / f8
    );
    assert!(f8 < bf, "fp8 {f8} ms is no faster than bf16 {bf} ms");
}

/// cudarc's cuBLASLt bindings (CUDA 13) load from the library PyTorch ships (every symbol
/// they expect is there), on any machine that has it: no GPU needed.
#[test]
fn cublaslt_loads_with_every_symbol_where_it_is_installed() {
    let found = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .any(|d| std::path::Path::new(d).join("libcublasLt.so.13").exists());
    if !found {
        println!("SKIPPED cuBLASLt loading: libcublasLt.so.13 not on LD_LIBRARY_PATH");
        return;
    }
    // SAFETY: probes whether the shared library loads with every symbol.
    assert!(unsafe { cudarc::cublaslt::sys::is_culib_present() });
}
