//! The board's SM clock and power as NVML reports them, for calibration to record beside its
//! timings: the same power cap holds a step at clocks 270 MHz apart by what the step's work
//! spends a cycle (an H200 at 690 W: a mix of products and adds at 1665 MHz, GPT 1.3B at 1815,
//! a Llama-style 3B at 1545; docs/measurements.md, 2026-11-28), so a profile's burst times mean
//! little without the clock they ran at.
//!
//! libnvidia-ml ships with the driver, not with CUDA: it is opened at run time and, where it
//! is missing or refuses, calibration records no clocks and says so, as before.

use std::ffi::{c_char, c_uint, c_void, CString};

type Ret = c_uint;
type Device = *mut c_void;

/// `NVML_CLOCK_SM`.
const CLOCK_SM: c_uint = 1;

/// An opened board.
pub struct Nvml {
    _lib: libloading::Library,
    device: Device,
    clock: unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> Ret,
    power: unsafe extern "C" fn(Device, *mut c_uint) -> Ret,
}

impl Nvml {
    /// The board at PCI address `bus_id` ("0000:65:00.0"), or why it cannot be read.
    pub fn open(bus_id: &str) -> Result<Nvml, String> {
        // SAFETY: loading the driver's NVML runs its initialisers only.
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
            .map_err(|e| format!("libnvidia-ml.so.1: {e}"))?;
        // SAFETY: each symbol is NVML's documented C entry point with this signature.
        unsafe {
            let init: libloading::Symbol<unsafe extern "C" fn() -> Ret> =
                lib.get(b"nvmlInit_v2\0").map_err(|e| e.to_string())?;
            let by_bus: libloading::Symbol<
                unsafe extern "C" fn(*const c_char, *mut Device) -> Ret,
            > = lib
                .get(b"nvmlDeviceGetHandleByPciBusId_v2\0")
                .map_err(|e| e.to_string())?;
            let clock = *lib
                .get::<unsafe extern "C" fn(Device, c_uint, *mut c_uint) -> Ret>(
                    b"nvmlDeviceGetClockInfo\0",
                )
                .map_err(|e| e.to_string())?;
            let power = *lib
                .get::<unsafe extern "C" fn(Device, *mut c_uint) -> Ret>(
                    b"nvmlDeviceGetPowerUsage\0",
                )
                .map_err(|e| e.to_string())?;
            let r = init();
            if r != 0 {
                return Err(format!("nvmlInit_v2 returned {r}"));
            }
            let id = CString::new(bus_id).map_err(|e| e.to_string())?;
            let mut device: Device = std::ptr::null_mut();
            let r = by_bus(id.as_ptr(), &mut device);
            if r != 0 {
                return Err(format!("no NVML device at {bus_id} ({r})"));
            }
            Ok(Nvml {
                _lib: lib,
                device,
                clock,
                power,
            })
        }
    }

    /// The SM clock (MHz) and the board's power (W), now; NVML averages the power over about
    /// a second.
    pub fn sample(&self) -> Option<(f64, f64)> {
        let (mut mhz, mut mw) = (0, 0);
        // SAFETY: a handle NVML returned, and out-pointers to live locals.
        let ok = unsafe {
            (self.clock)(self.device, CLOCK_SM, &mut mhz) == 0
                && (self.power)(self.device, &mut mw) == 0
        };
        ok.then_some((mhz as f64, mw as f64 / 1e3))
    }
}
