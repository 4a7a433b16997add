//! A layer's linear products, forward and backward: through cuBLAS in the storage type, or
//! under `precision = fp8` through cuBLASLt in fp8 where the dimensions allow
//! (`device::fp8`), with the step's weight casts (`begin_step`).

use super::{Engine, Res};
use crate::device::cuda::Buf;
use crate::device::fp8::{self, Linear};
use crate::train::model::{LayerTensor, Tensor};
use planc_compiler::cost::kinds::WorkKind;
use planc_compiler::plan::Precision;

impl Engine {
    /// What a step does before its passes: under fp8, the scales set from the amax
    /// histories and the weights cast to fp8 for the step (`device::fp8`).
    pub fn begin_step(&mut self) -> Res {
        if self.fp8.is_none() {
            return Ok(());
        }
        self.mark(WorkKind::Linear, || "fp8 weight casts".to_string())?;
        let weights: Vec<(Linear, Buf)> = self
            .fp8_linears
            .iter()
            .map(|(&(l, part), lin)| (*lin, self.wx_of(Tensor::Layer(l, part))))
            .collect();
        let fp8 = self.fp8.as_mut().expect("checked above");
        fp8.begin_step(&self.gpu, &weights)
    }

    /// How many of this engine's products run in fp8.
    pub fn fp8_products(&self) -> usize {
        self.fp8_linears.len()
    }

    /// Under `precision = fp8`, a line when some of the layers' products run in bf16
    /// (dimensions cuBLASLt's fp8 products do not take).
    pub fn fp8_note(&self) -> Option<String> {
        if self.shape.precision != Precision::Fp8 {
            return None;
        }
        let layers = self.shape.stage.chunks.iter().map(Vec::len).sum::<usize>();
        let all = 4 * layers;
        let bf16: Vec<String> = self
            .shape
            .dims
            .linear_shapes()
            .iter()
            .filter(|(_, i, o)| !fp8::supports(self.rows(), *i, *o))
            .map(|(part, i, o)| format!("{} ({i} → {o})", part.name()))
            .collect();
        (self.fp8_products() < all).then(|| {
            format!(
                "note: precision = fp8 runs {} of the layers' {all} linear products in fp8; \
                 {} stay bf16 (fp8 products need the tokens of a micro-batch, {}, and each \
                 side to be multiples of 16)",
                self.fp8_products(),
                bf16.join(", "),
                self.rows()
            )
        })
    }

    /// A line when the plan's GELU MLP was to run in its products' epilogues
    /// (`planc_compiler::plan::planc_fuses_gelu`) and cuBLASLt had no such product for
    /// its shape, so planc's activation kernels run and the prediction is short by them.
    pub fn gelu_note(&self) -> Option<String> {
        self.gelu_kernels.then(|| {
            let (c, f) = self.linear_shape(LayerTensor::FcW);
            gelu_kernels_note(c, f, self.rows())
        })
    }

    /// `out[rows, o] = inp[rows, i] · Wᵀ` for layer `l`'s weight `part`: in fp8 where it
    /// runs so, else through cuBLAS in the storage type.
    pub(super) fn linear(
        &self,
        l: usize,
        part: LayerTensor,
        out: Buf,
        inp: Buf,
        rows: usize,
    ) -> Res {
        let (i, o) = self.linear_shape(part);
        match (&self.fp8, self.fp8_linears.get(&(l, part))) {
            (Some(f), Some(lin)) => f.forward(&self.gpu, lin, out, inp, rows),
            _ => {
                let w = self.wx_of(Tensor::Layer(l, part));
                self.blas.linear(out, inp, w, rows, i, o)
            }
        }
    }

    /// Backward of `linear`: `dinp = dout · W` and the weight gradient `+= doutᵀ · inp`
    /// (`=` for the step's first, see `zero_grads`).
    pub(super) fn linear_bwd(
        &self,
        l: usize,
        part: LayerTensor,
        dinp: Buf,
        dout: Buf,
        inp: Buf,
        rows: usize,
    ) -> Res {
        match (&self.fp8, self.fp8_linears.get(&(l, part))) {
            (Some(f), Some(lin)) => {
                let gw = self.g_of(Tensor::Layer(l, part));
                let add = self.accumulates(l, part);
                f.backward(&self.gpu, lin, dinp, gw, dout, inp, rows, add)
            }
            _ => {
                let (i, o) = self.linear_shape(part);
                let w = self.wx_of(Tensor::Layer(l, part));
                self.blas.linear_dinp(dinp, dout, w, rows, i, o)?;
                self.linear_dw(l, part, dout, inp, rows)
            }
        }
    }

    /// The weight gradient of [`Self::linear_bwd`] alone, in the storage type, added into
    /// the gradient where this step accumulates it: for a product whose input gradient ran
    /// elsewhere (the GELU epilogue's down product).
    pub(super) fn linear_dw(
        &self,
        l: usize,
        part: LayerTensor,
        dout: Buf,
        inp: Buf,
        rows: usize,
    ) -> Res {
        let (i, o) = self.linear_shape(part);
        let gw = self.g_of(Tensor::Layer(l, part));
        let add = self.accumulates(l, part);
        self.blas.linear_dw_as(gw, dout, inp, (rows, i, o), add)
    }

    /// (inputs, outputs) of a layer's linear weight `part` on this rank.
    pub(super) fn linear_shape(&self, part: LayerTensor) -> (usize, usize) {
        self.shape
            .dims
            .linear_shapes()
            .into_iter()
            .find(|s| s.0 == part)
            .map(|s| (s.1, s.2))
            .expect("a layer's linear weight")
    }
}

/// [`Engine::gelu_note`]'s line for an MLP of `c` → `f` over `rows` tokens.
fn gelu_kernels_note(c: usize, f: usize, rows: usize) -> String {
    format!(
        "note: cuBLASLt has no GELU epilogue product for the MLP's {c} → {f} at {rows} \
         tokens, so its activation runs in planc's kernels (three passes over the layer's \
         {rows} × {f} activations a micro-batch), which the prediction, made for the \
         epilogues, does not count"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_gelu_note_names_the_shape_and_what_the_prediction_leaves_out() {
        assert_eq!(
            super::gelu_kernels_note(768, 3072, 16384),
            "note: cuBLASLt has no GELU epilogue product for the MLP's 768 → 3072 at 16384 \
             tokens, so its activation runs in planc's kernels (three passes over the layer's \
             16384 × 3072 activations a micro-batch), which the prediction, made for the \
             epilogues, does not count"
        );
    }
}
