// planc's training kernels: everything but the matrix products (cuBLAS runs those).
//
// Compiled at run time with NVRTC, once per precision, with `-DPLANC_X=0|1|2` choosing the
// storage type of activations and compute weights (fp32, bf16, fp16). No CUDA header is
// included: bf16 and fp16 are stored as 16-bit integers and converted here, so NVRTC needs
// nothing beyond itself. Arithmetic is fp32 throughout; gradients of weights are fp32.
//
// Reductions over rows (bias, norm-weight and embedding gradients, the gradient norm) are
// written in two fixed-order stages rather than with float atomics, so a step's result does
// not depend on scheduling: a resumed run reproduces the losses of one that never stopped.

#if PLANC_X == 0
typedef float X;
__device__ __forceinline__ float ld(X v) { return v; }
__device__ __forceinline__ X st(float v) { return v; }
#elif PLANC_X == 1
typedef unsigned short X;
__device__ __forceinline__ float ld(X v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ X st(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (X)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return (X)(u >> 16);
}
#else
typedef unsigned short X;
__device__ __forceinline__ float ld(X v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
}
__device__ __forceinline__ X st(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#endif

#define WARP 32

// Elementwise kernels move 16 bytes per load and store (8 bf16/fp16 or 4 fp32 elements a
// thread): 2-byte accesses reach well under half of HBM bandwidth. Every buffer starts
// 256-byte aligned and parameter offsets are multiples of 64 elements, so a thread's
// first element is 16-byte aligned; the last thread takes the tail one by one.
#define VEC (16 / (int)sizeof(X))
union Pack {
    uint4 u;
    X x[16 / sizeof(X)];
};
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = WARP / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = WARP / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of at most 1024 threads; every thread gets the result.
__device__ float block_sum(float v) {
    __shared__ float part[WARP];
    __shared__ float total;
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    v = warp_sum(v);
    if (lane == 0) part[w] = v;
    __syncthreads();
    if (w == 0) {
        float s = lane < (blockDim.x + WARP - 1) / WARP ? part[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    float r = total;
    __syncthreads();
    return r;
}

__device__ float block_max(float v) {
    __shared__ float part[WARP];
    __shared__ float total;
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    v = warp_max(v);
    if (lane == 0) part[w] = v;
    __syncthreads();
    if (w == 0) {
        float s = lane < (blockDim.x + WARP - 1) / WARP ? part[lane] : -INFINITY;
        s = warp_max(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    float r = total;
    __syncthreads();
    return r;
}

extern "C" {

// ---- casts and elementwise -------------------------------------------------------------

__global__ void cast_to_x(X* out, const float* in, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = st(in[i]);
}

__global__ void scale_f32(float* x, float s, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

// out = a + b (the residual stream). VEC elements a thread.
__global__ void add_x(X* out, const X* a, const X* b, long n) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) {
        Pack pa, pb, po;
        pa.u = *(const uint4*)(a + i);
        pb.u = *(const uint4*)(b + i);
        for (int k = 0; k < VEC; k++) po.x[k] = st(ld(pa.x[k]) + ld(pb.x[k]));
        *(uint4*)(out + i) = po.u;
    } else {
        for (long j = i; j < n; j++) out[j] = st(ld(a[j]) + ld(b[j]));
    }
}

// x[n, c] += bias[c]. VEC elements a thread.
__global__ void add_bias(X* x, const X* bias, long rows, int cols) {
    long n = rows * cols;
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) {
        Pack p;
        p.u = *(const uint4*)(x + i);
        for (int k = 0; k < VEC; k++) p.x[k] = st(ld(p.x[k]) + ld(bias[(i + k) % cols]));
        *(uint4*)(x + i) = p.u;
    } else {
        for (long j = i; j < n; j++) x[j] = st(ld(x[j]) + ld(bias[j % cols]));
    }
}

// ---- embeddings --------------------------------------------------------------------------

// out[n, :] = wte[tok[n], :] + wpe[n % S, :] (wpe may be null: rope models).
__global__ void embed_fwd(X* out, const int* tok, const X* wte, const X* wpe, long n_tok,
                          int C, int S) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n_tok * C) return;
    long n = i / C;
    int c = i % C;
    float v = ld(wte[(long)tok[n] * C + c]);
    if (wpe) v += ld(wpe[(long)(n % S) * C + c]);
    out[i] = st(v);
}

// Token-embedding gradient, one block per distinct token of the batch: the positions of
// token `uniq[b]` are pos[start[b] .. start[b+1]] (sorted on the host), summed in order.
__global__ void embed_bwd_tokens(float* dwte, const X* dout, const int* uniq, const int* start,
                                 const int* pos, int C) {
    int b = blockIdx.x;
    long row = (long)uniq[b] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0.0f;
        for (int k = start[b]; k < start[b + 1]; k++) s += ld(dout[(long)pos[k] * C + c]);
        dwte[row + c] += s;
    }
}

// Position-embedding gradient: dwpe[t, c] += Σ_b dout[b, t, c].
__global__ void embed_bwd_positions(float* dwpe, const X* dout, int B, int S, int C) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= (long)S * C) return;
    float s = 0.0f;
    for (int b = 0; b < B; b++) s += ld(dout[(long)b * S * C + i]);
    dwpe[i] += s;
}

// ---- norms -------------------------------------------------------------------------------

// One block per row. rms = 1 drops the mean and the bias (RMSNorm).
__global__ void norm_fwd(X* out, float* mean, float* rstd, const X* inp, const X* w, const X* b,
                         int C, float eps, int rms) {
    long row = blockIdx.x;
    const X* x = inp + row * C;
    float s = 0.0f;
    if (!rms) {
        for (int c = threadIdx.x; c < C; c += blockDim.x) s += ld(x[c]);
        s = block_sum(s);
    }
    float m = rms ? 0.0f : s / C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float d = ld(x[c]) - m;
        v += d * d;
    }
    v = block_sum(v) / C;
    float r = rsqrtf(v + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float y = (ld(x[c]) - m) * r * ld(w[c]);
        if (b) y += ld(b[c]);
        out[row * C + c] = st(y);
    }
    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// dinp += the input gradient of the norm; one block per row. The weight and bias gradients
// are reduced by `norm_bwd_params`.
__global__ void norm_bwd_input(X* dinp, const X* dout, const X* inp, const X* w,
                               const float* mean, const float* rstd, int C, int rms) {
    long row = blockIdx.x;
    const X* x = inp + row * C;
    const X* dy = dout + row * C;
    float m = mean[row], r = rstd[row];
    float s1 = 0.0f, s2 = 0.0f;  // Σ dŷ, Σ dŷ·x̂ with dŷ = dy·w
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dn = ld(dy[c]) * ld(w[c]);
        float xh = (ld(x[c]) - m) * r;
        s1 += dn;
        s2 += dn * xh;
    }
    s1 = block_sum(s1) / C;
    s2 = block_sum(s2) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dn = ld(dy[c]) * ld(w[c]);
        float xh = (ld(x[c]) - m) * r;
        float g = rms ? (dn - xh * s2) * r : (dn - s1 - xh * s2) * r;
        long i = row * C + c;
        dinp[i] = st(ld(dinp[i]) + g);
    }
}

// Partial weight/bias gradients of a norm over a chunk of rows: part[chunk][c] (dw) and
// part[chunks + chunk][c] (db). Reduced in order by `sum_partials`.
__global__ void norm_bwd_params(float* part, const X* dout, const X* inp, const float* mean,
                                const float* rstd, long rows, int C, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int chunk = blockIdx.y;
    if (c >= C) return;
    long r0 = (long)chunk * rows_per_chunk;
    long r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float dw = 0.0f, db = 0.0f;
    for (long r = r0; r < r1; r++) {
        float dy = ld(dout[r * C + c]);
        dw += dy * (ld(inp[r * C + c]) - mean[r]) * rstd[r];
        db += dy;
    }
    part[(long)chunk * C + c] = dw;
    part[((long)gridDim.y + chunk) * C + c] = db;
}

// Partial column sums of x[rows, cols] over chunks of rows (bias gradients).
__global__ void colsum_partial(float* part, const X* x, long rows, int cols, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int chunk = blockIdx.y;
    if (c >= cols) return;
    long r0 = (long)chunk * rows_per_chunk;
    long r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float s = 0.0f;
    for (long r = r0; r < r1; r++) s += ld(x[r * cols + c]);
    part[(long)chunk * cols + c] = s;
}

// out[c] += Σ_k part[k][c], k in order.
__global__ void sum_partials(float* out, const float* part, int chunks, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) s += part[(long)k * cols + c];
    out[c] += s;
}

// ---- MLP activations ----------------------------------------------------------------------

// GELU with the tanh approximation (GPT-2's `gelu_new`).
__device__ __forceinline__ float gelu(float x) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

// VEC elements a thread.
__global__ void gelu_fwd(X* out, const X* inp, long n) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) {
        Pack p;
        p.u = *(const uint4*)(inp + i);
        for (int k = 0; k < VEC; k++) p.x[k] = st(gelu(ld(p.x[k])));
        *(uint4*)(out + i) = p.u;
    } else {
        for (long j = i; j < n; j++) out[j] = st(gelu(ld(inp[j])));
    }
}

__device__ __forceinline__ float gelu_grad(float x) {
    const float k = 0.7978845608028654f;
    float u = k * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    float du = k * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// VEC elements a thread.
__global__ void gelu_bwd(X* dinp, const X* inp, const X* dout, long n) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n) {
        Pack px, pd;
        px.u = *(const uint4*)(inp + i);
        pd.u = *(const uint4*)(dout + i);
        for (int k = 0; k < VEC; k++) px.x[k] = st(gelu_grad(ld(px.x[k])) * ld(pd.x[k]));
        *(uint4*)(dinp + i) = px.u;
    } else {
        for (long j = i; j < n; j++) dinp[j] = st(gelu_grad(ld(inp[j])) * ld(dout[j]));
    }
}

// h[n, 0:F] is the gate, h[n, F:2F] the up projection: out = silu(gate) · up. VEC
// elements of a row a thread (F is a multiple of VEC; else one by one).
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

__global__ void swiglu_fwd(X* out, const X* h, long rows, int F) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    long n = rows * F;
    if (i >= n) return;
    long r = i / F;
    int f = i % F;
    const X* gate = h + r * 2 * F + f;
    const X* up = gate + F;
    if (F % VEC == 0) {
        Pack pg, pu, po;
        pg.u = *(const uint4*)gate;
        pu.u = *(const uint4*)up;
        for (int k = 0; k < VEC; k++) po.x[k] = st(silu(ld(pg.x[k])) * ld(pu.x[k]));
        *(uint4*)(out + i) = po.u;
    } else {
        for (long j = i; j < n && j < i + VEC; j++) {
            long rr = j / F;
            int ff = j % F;
            out[j] = st(silu(ld(h[rr * 2 * F + ff])) * ld(h[rr * 2 * F + F + ff]));
        }
    }
}

__device__ __forceinline__ void swiglu_grad(float g, float u, float d, float* dg, float* du) {
    float sg = 1.0f / (1.0f + expf(-g));
    *dg = d * u * sg * (1.0f + g * (1.0f - sg));
    *du = d * g * sg;
}

__global__ void swiglu_bwd(X* dh, const X* h, const X* dout, long rows, int F) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    long n = rows * F;
    if (i >= n) return;
    long r = i / F;
    int f = i % F;
    if (F % VEC == 0) {
        Pack pg, pu, pd, og, ou;
        pg.u = *(const uint4*)(h + r * 2 * F + f);
        pu.u = *(const uint4*)(h + r * 2 * F + F + f);
        pd.u = *(const uint4*)(dout + i);
        for (int k = 0; k < VEC; k++) {
            float dg, du;
            swiglu_grad(ld(pg.x[k]), ld(pu.x[k]), ld(pd.x[k]), &dg, &du);
            og.x[k] = st(dg);
            ou.x[k] = st(du);
        }
        *(uint4*)(dh + r * 2 * F + f) = og.u;
        *(uint4*)(dh + r * 2 * F + F + f) = ou.u;
    } else {
        for (long j = i; j < n && j < i + VEC; j++) {
            long rr = j / F;
            int ff = j % F;
            float dg, du;
            swiglu_grad(ld(h[rr * 2 * F + ff]), ld(h[rr * 2 * F + F + ff]), ld(dout[j]), &dg, &du);
            dh[rr * 2 * F + ff] = st(dg);
            dh[rr * 2 * F + F + ff] = st(du);
        }
    }
}

// ---- attention ----------------------------------------------------------------------------

// Rope as Llama applies it ("rotate half"): element i pairs with i + D/2. The angles'
// cosines and sines come from a table [T, D/2] made once on the host (the sine of a large
// angle is slow to compute on the device, and the table is what Hugging Face computes).
//
// Index arithmetic below is 32-bit: the engine refuses tensors of 2³¹ elements or more.

// qkv[B, T, (H + 2G)·D] → q, k, v [B, H, T, D]: rope on q and k when `rcos` is not null,
// and each key/value head repeated for the H / G query heads that share it.
__global__ void qkv_split(X* q, X* k, X* v, const X* qkv, int B, int T, int H, int G, int D,
                          const float* rcos, const float* rsin) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned total = (unsigned)B * H * T * D;
    if (i >= total) return;
    unsigned d = i % D;
    unsigned t = (i / D) % T;
    unsigned h = (i / (D * T)) % H;
    unsigned b = i / (D * T * H);
    unsigned g = h / (H / G);
    const X* row = qkv + ((unsigned long long)b * T + t) * (unsigned long long)(H + 2 * G) * D;
    const X* qs = row + h * D;
    const X* ks = row + (H + g) * D;
    const X* vs = row + (H + G + g) * D;
    if (rcos) {
        unsigned half = D / 2;
        unsigned j = d < half ? d : d - half;
        float c = rcos[t * half + j], s = rsin[t * half + j];
        float qo = d < half ? -ld(qs[d + half]) : ld(qs[d - half]);
        float ko = d < half ? -ld(ks[d + half]) : ld(ks[d - half]);
        q[i] = st(ld(qs[d]) * c + qo * s);
        k[i] = st(ld(ks[d]) * c + ko * s);
    } else {
        q[i] = qs[d];
        k[i] = ks[d];
    }
    v[i] = vs[d];
}

// The inverse of qkv_split for gradients: un-rotate dq and dk, and sum the gradients of the
// query heads that share a key/value head, in head order. One thread per element of dqkv.
__global__ void qkv_merge_grad(X* dqkv, const X* dq, const X* dk, const X* dv, int B, int T,
                               int H, int G, int D, const float* rcos, const float* rsin) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned W = (unsigned)(H + 2 * G) * D;
    unsigned total = (unsigned)B * T * W;
    if (i >= total) return;
    unsigned col = i % W;
    unsigned t = (i / W) % T;
    unsigned b = i / (W * T);
    unsigned head = col / D, d = col % D;
    unsigned half = D / 2;
    unsigned j = d < half ? d : d - half;
    float c = 1.0f, s = 0.0f;
    // Rotation transpose: x[d] = y[d]·cos + y[d ± half]·(±sin).
    if (head < (unsigned)H) {
        const X* src = dq + (((unsigned long long)b * H + head) * T + t) * D;
        float val = ld(src[d]);
        if (rcos) {
            c = rcos[t * half + j];
            s = rsin[t * half + j];
            float o = d < half ? ld(src[d + half]) : -ld(src[d - half]);
            val = val * c + o * s;
        }
        dqkv[i] = st(val);
        return;
    }
    bool is_v = head >= (unsigned)(H + G);
    unsigned g = is_v ? head - H - G : head - H;
    unsigned rep = H / G;
    bool rot = rcos && !is_v;
    if (rot) {
        c = rcos[t * half + j];
        s = rsin[t * half + j];
    }
    float acc = 0.0f;
    for (unsigned r = 0; r < rep; r++) {
        unsigned h = g * rep + r;
        const X* src = (is_v ? dv : dk) + (((unsigned long long)b * H + h) * T + t) * D;
        float val = ld(src[d]);
        if (rot) {
            float o = d < half ? ld(src[d + half]) : -ld(src[d - half]);
            val = val * c + o * s;
        }
        acc += val;
    }
    dqkv[i] = st(acc);
}

// o[B, H, T, D] → out[B, T, H·D]
__global__ void heads_merge(X* out, const X* o, int B, int T, int H, int D) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned total = (unsigned)B * T * H * D;
    if (i >= total) return;
    unsigned d = i % D;
    unsigned h = (i / D) % H;
    unsigned t = (i / (D * H)) % T;
    unsigned b = i / (D * H * T);
    out[i] = o[(((unsigned long long)b * H + h) * T + t) * D + d];
}

// out[B, T, H·D] → o[B, H, T, D] (the gradient's way back)
__global__ void heads_split(X* o, const X* out, int B, int T, int H, int D) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned total = (unsigned)B * T * H * D;
    if (i >= total) return;
    unsigned d = i % D;
    unsigned t = (i / D) % T;
    unsigned h = (i / (D * T)) % H;
    unsigned b = i / (D * T * H);
    o[i] = out[(((unsigned long long)b * T + t) * H + h) * D + d];
}

// exp(a − m), with exp(−∞ − −∞) taken as 0 (an empty share of a row).
__device__ __forceinline__ float exp_from(float a, float m) {
    return a == -INFINITY ? 0.0f : expf(a - m);
}

// Causal softmax of scale·scores, in place, one warp per row of one (b, h): row t keeps
// columns 0..t, the rest become 0. One pass finds the maximum and the sum together
// (online rescaling), a second writes: the row is read twice and written once.
__global__ void softmax_causal_fwd(X* p, long rows, int T, float scale) {
    long row = blockIdx.x * (long)(blockDim.x / WARP) + threadIdx.x / WARP;
    if (row >= rows) return;
    int lane = threadIdx.x % WARP;
    int t = row % T;
    X* x = p + row * T;
    float m = -INFINITY, s = 0.0f;
    for (int j = lane; j <= t; j += WARP) {
        float v = ld(x[j]) * scale;
        float mn = fmaxf(m, v);
        s = s * exp_from(m, mn) + expf(v - mn);
        m = mn;
    }
    for (int o = WARP / 2; o > 0; o /= 2) {
        float mo = __shfl_xor_sync(0xffffffffu, m, o);
        float so = __shfl_xor_sync(0xffffffffu, s, o);
        float mn = fmaxf(m, mo);
        s = s * exp_from(m, mn) + so * exp_from(mo, mn);
        m = mn;
    }
    float inv = 1.0f / s;
    for (int j = lane; j < T; j += WARP) {
        if (j <= t) {
            x[j] = st(expf(ld(x[j]) * scale - m) * inv);
        } else {
            x[j] = st(0.0f);  // masked: never read
        }
    }
}

// dS = scale · P ∘ (dP − Σ_j P·dP), in place over dp; one warp per row.
__global__ void softmax_causal_bwd(X* dp, const X* p, long rows, int T, float scale) {
    long row = blockIdx.x * (long)(blockDim.x / WARP) + threadIdx.x / WARP;
    if (row >= rows) return;
    int lane = threadIdx.x % WARP;
    int t = row % T;
    const X* pr = p + row * T;
    X* d = dp + row * T;
    float s = 0.0f;
    for (int j = lane; j <= t; j += WARP) s += ld(pr[j]) * ld(d[j]);
    s = warp_sum(s);
    for (int j = lane; j < T; j += WARP) {
        if (j <= t) {
            d[j] = st(scale * ld(pr[j]) * (ld(d[j]) - s));
        } else {
            d[j] = st(0.0f);  // masked: never read
        }
    }
}

// ---- loss ---------------------------------------------------------------------------------

// One block per token: loss[n] = logsumexp(logits[n]) − logits[n, target[n]], and the
// logits overwritten with their gradient (softmax − onehot)·dscale.
__global__ void cross_entropy(X* logits, float* loss, const int* target, int V, float dscale) {
    long row = blockIdx.x;
    X* x = logits + row * V;
    // One pass for the maximum and the sum together (online rescaling), one to write.
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float v = ld(x[j]);
        float mn = fmaxf(m, v);
        s = s * exp_from(m, mn) + expf(v - mn);
        m = mn;
    }
    float mx = block_max(m);
    s = block_sum(s * exp_from(m, mx));
    int tgt = target[row];
    float lt = ld(x[tgt]);
    __syncthreads();
    if (threadIdx.x == 0) loss[row] = mx + logf(s) - lt;
    float inv = 1.0f / s;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float pj = expf(ld(x[j]) - mx) * inv;
        x[j] = st((pj - (j == tgt ? 1.0f : 0.0f)) * dscale);
    }
}

// ---- reductions and the optimizer -----------------------------------------------------------

// part[block] = Σ x² over the block's grid-stride share (fixed order per block).
__global__ void sumsq_partial(float* part, const float* x, long n) {
    float s = 0.0f;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        float v = x[i];
        s += v * v;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// part[block] = Σ x over the block's share (the step's loss from per-token losses).
__global__ void sum_partial(float* part, const float* x, long n) {
    float s = 0.0f;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        s += x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// AdamW as torch.optim.AdamW computes it (decoupled decay first, then the bias-corrected
// update), on fp32 master weights; `gscale` unscales and clips the gradient, and the
// compute copy (bf16/fp16) is refreshed in the same pass (`wx` null in fp32).
__global__ void adamw(float* w, X* wx, const float* g, float* m, float* v, long n, float lr,
                      float b1, float b2, float eps, float wd, float bc1, float bc2_sqrt,
                      float gscale) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i] * gscale;
    float p = w[i] * (1.0f - lr * wd);
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p -= (lr / bc1) * mi / (sqrtf(vi) / bc2_sqrt + eps);
    w[i] = p;
    if (wx) wx[i] = st(p);
}

// SGD with decoupled weight decay.
__global__ void sgd(float* w, X* wx, const float* g, long n, float lr, float wd, float gscale) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float p = w[i] * (1.0f - lr * wd) - lr * g[i] * gscale;
    w[i] = p;
    if (wx) wx[i] = st(p);
}

}  // extern "C"
