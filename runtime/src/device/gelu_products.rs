//! A GELU MLP's activation inside its two products, through cuBLASLt's epilogues: the up
//! product adds its bias and applies GELU as it writes (keeping GELU's input for backward),
//! and the down product's input gradient applies GELU's gradient and sums the up product's
//! bias gradient as it is written. The activation then makes no pass over memory of its
//! own: per token and MLP column it saves a read in forward, and in backward the write and
//! read of the activation's output gradient and the bias gradient's read.
//!
//! Used in 16-bit training where cuBLASLt is present (`planc_compiler::plan::
//! planc_fuses_gelu` is the rule the cost model prices by); fp32 keeps planc's own kernels,
//! whose GELU the numerics against `transformers` are pinned to.

use planc_compiler::plan::Precision;

use super::cuda::{Buf, Gpu};
use super::lt::{Epilogue, Lt, Operand, Product, Ty};
use super::rows;
use crate::error::RunError;

/// The epilogue products of one engine.
pub struct GeluProducts {
    lt: Lt,
    x: Ty,
    /// The type the down product's epilogue writes the bias gradient in (fp32 where
    /// cuBLASLt takes it, else the storage type, as PyTorch's autocast and Transformer
    /// Engine keep it), or None where it takes neither and planc's column sums do it
    /// ([`Self::runs`] chooses).
    bgrad: Option<Ty>,
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
            bgrad: Some(Ty::F32),
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
    /// `[c, f]` and the `h` [`Self::up`] kept; where `dbias` is not NULL, the up product's
    /// bias gradient `Σ_rows dh` added to it (fp32, f long) through `scratch` (at least
    /// `2f` floats, or `f` of them a chunk of rows where the epilogue does not sum: cuBLASLt
    /// writes the sum, micro-batches add).
    #[allow(clippy::too_many_arguments)]
    pub fn down_dinp(
        &self,
        gpu: &Gpu,
        dh: Buf,
        (dbias, scratch): (Buf, Buf),
        dout: Buf,
        w2: Buf,
        h: Buf,
        (rows, c, f): (usize, usize, usize),
    ) -> Result<(), RunError> {
        let p = self.down_product(dh, (dbias, scratch), dout, w2, h, (rows, c, f), self.bgrad);
        self.lt.matmul(gpu, &p)?;
        if dbias == Buf::NULL {
            return Ok(());
        }
        match self.bgrad {
            Some(Ty::F32) => rows::sum_partials(gpu, dbias, scratch, 1, f),
            // The 16-bit sum as a row of one, summed into fp32 beside it.
            Some(_) => rows::bias_grad(gpu, (dbias, p.bias.0, scratch), 1, f),
            None => rows::bias_grad(gpu, (dbias, dh, scratch), rows, f),
        }
    }

    /// The down product's input gradient, its epilogue summing the bias gradient in type
    /// `bgrad` (None: not summing it), into `scratch` (fp32) or past its first `f` floats.
    #[allow(clippy::too_many_arguments)]
    fn down_product(
        &self,
        dh: Buf,
        (dbias, scratch): (Buf, Buf),
        dout: Buf,
        w2: Buf,
        h: Buf,
        (rows, c, f): (usize, usize, usize),
        bgrad: Option<Ty>,
    ) -> Product {
        let bgrad = bgrad.filter(|_| dbias != Buf::NULL);
        let bias = match bgrad {
            Some(Ty::F32) | None => (scratch, Ty::F32),
            Some(t) => (scratch.at(f, 4), t),
        };
        // Column-major: dhᵀ (f × rows) = W2 (stored f × c) · doutᵀ (c × rows).
        Product {
            mnk: (f, rows, c),
            trans_a: false,
            a: operand(w2, self.x),
            b: operand(dout, self.x),
            d: (dh, self.x),
            accumulate: false,
            fast: false,
            epilogue: Epilogue::Dgelu {
                bgrad: bgrad.is_some(),
            },
            bias,
            aux: h,
        }
    }

    /// Whether cuBLASLt has both products for these buffers (those of the engine's first
    /// activation set: the others share their alignment) and shapes, with the arguments
    /// of [`Self::up`] and [`Self::down_dinp`]; their plans are made here, before any
    /// step, and the bias gradient's type chosen: fp32 where cuBLASLt takes it, else the
    /// storage type, else none (the down product without the sum).
    #[allow(clippy::too_many_arguments)]
    pub fn runs(
        &mut self,
        (act, h): (Buf, Buf),
        (inp, w, bias): (Buf, Buf, Buf),
        (dh, dbias, scratch): (Buf, Buf, Buf),
        (dout, w2): (Buf, Buf),
        shape: (usize, usize, usize),
    ) -> bool {
        let up = self.up_product((act, h), inp, w, bias, shape);
        if self.lt.prepare(&up).is_err() {
            return false;
        }
        for bgrad in [Some(Ty::F32), Some(self.x), None] {
            let down = self.down_product(dh, (dbias, scratch), dout, w2, h, shape, bgrad);
            if self.lt.prepare(&down).is_ok() {
                self.bgrad = bgrad;
                return true;
            }
        }
        false
    }

    /// The type the bias gradient is summed in by the down product's epilogue (None: by
    /// planc's column sums after it), for the run's note.
    pub fn bias_gradient_type(&self) -> Option<Ty> {
        self.bgrad
    }
}
