//! A GELU MLP's activation inside its two products, through cuBLASLt's epilogues: the up
//! product adds its bias and applies GELU as it writes (keeping GELU's input for backward),
//! and the down product's input gradient applies GELU's gradient as it is written. The
//! activation then makes no pass over memory of its own: per token and MLP column it saves
//! a read in forward, and in backward the write and the read of the activation's output
//! gradient.
//!
//! The up product's bias gradient stays with planc's column sums over the gradient this
//! writes. cuBLASLt can sum it in the same epilogue (`DGELU_BGRAD`), but on the H200 that
//! product took GPT-2's step from 30.2 to 32.7 ms, and the forward epilogue alone saved
//! nothing measurable (30.6 against 30.6 ms without either; docs/measurements.md,
//! 2026-11-29, twelfth session).
//!
//! Used in 16-bit training at hidden sizes up to 1024 where cuBLASLt has the products
//! (`planc_compiler::plan::planc_fuses_gelu` is the rule the cost model prices by: at GPT
//! 6.6B's 4096 the epilogue products cost more than the passes they save); fp32 keeps
//! planc's own kernels, whose GELU the numerics against `transformers` are pinned to.

use planc_compiler::plan::Precision;

use super::cuda::{Buf, Gpu};
use super::lt::{Epilogue, Lt, Operand, Product, Ty};
use crate::error::RunError;

/// The epilogue products of one engine.
pub struct GeluProducts {
    lt: Lt,
    x: Ty,
}

fn operand(buf: Buf, ty: Ty) -> Operand {
    Operand {
        buf,
        ty,
        scale: Buf::NULL,
    }
}

impl GeluProducts {
    /// The products for training in `precision` with cuBLASLt's workspace `workspace`
    /// (cuBLAS's: the products run on one stream, one after another); None where they do
    /// not apply (fp32, fp8's products, or no libcublasLt).
    pub fn new(
        gpu: &Gpu,
        precision: Precision,
        workspace: Buf,
    ) -> Result<Option<GeluProducts>, RunError> {
        let x = match precision {
            Precision::Bf16 => Ty::Bf16,
            Precision::Fp16 => Ty::F16,
            Precision::Fp32 | Precision::Fp8 => return Ok(None),
        };
        if !super::lt::present() {
            return Ok(None);
        }
        Ok(Some(GeluProducts {
            lt: Lt::new(gpu, workspace)?,
            x,
        }))
    }

    /// `act [rows, f] = GELU(h)`, `h [rows, f] = inp [rows, c] · Wᵀ + bias`: W `[f, c]`,
    /// `bias` f long in the storage type (NULL for none). `h` is what [`Self::down_dinp`]
    /// takes back.
    #[allow(clippy::too_many_arguments)]
    pub fn up(
        &self,
        gpu: &Gpu,
        (act, h): (Buf, Buf),
        inp: Buf,
        w: Buf,
        bias: Buf,
        (rows, c, f): (usize, usize, usize),
    ) -> Result<(), RunError> {
        self.lt
            .matmul(gpu, &self.up_product((act, h), inp, w, bias, (rows, c, f)))
    }

    fn up_product(
        &self,
        (act, h): (Buf, Buf),
        inp: Buf,
        w: Buf,
        bias: Buf,
        (rows, c, f): (usize, usize, usize),
    ) -> Product {
        // Column-major: actᵀ (f × rows) = W (stored c × f, transposed) · inpᵀ (c × rows).
        Product {
            mnk: (f, rows, c),
            trans_a: true,
            a: operand(w, self.x),
            b: operand(inp, self.x),
            d: (act, self.x),
            accumulate: false,
            fast: false,
            epilogue: Epilogue::GeluAux {
                bias: bias != Buf::NULL,
            },
            bias: (bias, self.x),
            aux: h,
        }
    }

    /// `dh [rows, f] = (dout [rows, c] · W2) ⊙ GELU'(h)` for the down product's weight W2
    /// `[c, f]` and the `h` [`Self::up`] kept.
    pub fn down_dinp(
        &self,
        gpu: &Gpu,
        dh: Buf,
        (dout, w2, h): (Buf, Buf, Buf),
        shape: (usize, usize, usize),
    ) -> Result<(), RunError> {
        self.lt
            .matmul(gpu, &self.down_product(dh, (dout, w2, h), shape))
    }

    fn down_product(
        &self,
        dh: Buf,
        (dout, w2, h): (Buf, Buf, Buf),
        (rows, c, f): (usize, usize, usize),
    ) -> Product {
        // Column-major: dhᵀ (f × rows) = W2 (stored f × c) · doutᵀ (c × rows).
        Product {
            mnk: (f, rows, c),
            trans_a: false,
            a: operand(w2, self.x),
            b: operand(dout, self.x),
            d: (dh, self.x),
            accumulate: false,
            fast: false,
            epilogue: Epilogue::Dgelu,
            bias: (Buf::NULL, self.x),
            aux: h,
        }
    }

    /// Whether cuBLASLt has both products for these buffers (those of the engine's first
    /// activation set: the others share their alignment) and shapes, with the arguments
    /// of [`Self::up`] and [`Self::down_dinp`]; their plans are made here, before any
    /// step.
    pub fn runs(
        &self,
        (act, h): (Buf, Buf),
        (inp, w, bias): (Buf, Buf, Buf),
        (dh, dout, w2): (Buf, Buf, Buf),
        shape: (usize, usize, usize),
    ) -> bool {
        let up = self.up_product((act, h), inp, w, bias, shape);
        let down = self.down_product(dh, (dout, w2, h), shape);
        self.lt.prepare(&up).is_ok() && self.lt.prepare(&down).is_ok()
    }
}
