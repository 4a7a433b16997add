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
#if __CUDA_ARCH__ >= 800
    // Ampere's conversion instruction rounds to nearest even as the integer sequence below
    // does, in one instruction instead of six: the activations, loss and norms that store
    // bf16 are bound by issued instructions, not by bytes. NaN stays NaN (the canonical one).
    X h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (X)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return (X)(u >> 16);
#endif
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

// out[n, c] = a + b + bias[c] (the residual stream after a row-parallel product: its bias
// added on the way, not in a pass of its own). bias may be null. VEC elements a thread;
// c is a multiple of VEC (the launcher falls back to add_bias + add_x otherwise).
__global__ void add_bias_residual(X* out, const X* a, const X* b, const X* bias, long rows,
                                  int cols) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    if (i >= rows * cols) return;
    Pack pa, pb, po, pc;
    pa.u = *(const uint4*)(a + i);
    pb.u = *(const uint4*)(b + i);
    if (bias) pc.u = *(const uint4*)(bias + i % cols);
#pragma unroll
    for (int k = 0; k < VEC; k++)
        po.x[k] = st(ld(pa.x[k]) + ld(pb.x[k]) + (bias ? ld(pc.x[k]) : 0.0f));
    *(uint4*)(out + i) = po.u;
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

// Tensor parallelism (vocabulary-parallel embedding): this rank's rows of the table are the
// tokens [v0, v0 + V); other tokens contribute zero here and come from their rank in the
// reduction that follows.
__global__ void embed_vocab_fwd(X* out, const int* tok, const X* wte, long n_tok, int C, int v0,
                                int V) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n_tok * C) return;
    long n = i / C;
    int c = i % C;
    int t = tok[n] - v0;
    out[i] = (t >= 0 && t < V) ? wte[(long)t * C + c] : st(0.0f);
}

// Learned positions added to `rows` rows that start at row `row0` of the [B, S] batch (a
// sequence-parallel rank holds a share of the rows). Rounds like embed_fwd: the sum in
// fp32, stored once.
__global__ void add_positions(X* x, const X* wpe, long rows, long row0, int S, int C) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= rows * C) return;
    long n = i / C;
    int c = i % C;
    x[i] = st(ld(x[i]) + ld(wpe[((row0 + n) % S) * C + c]));
}

// Token-embedding gradient, one block per distinct token of the batch: the positions of
// token `uniq[b]` are pos[start[b] .. start[b+1]] (sorted on the host), summed in order.
// Blocks past the batch's distinct tokens (an empty range: the launch takes one block per
// token of the batch, so that its grid does not change from batch to batch and a CUDA
// graph can replay it) do nothing.
__global__ void embed_bwd_tokens(float* dwte, const X* dout, const int* uniq, const int* start,
                                 const int* pos, int C) {
    int b = blockIdx.x;
    if (start[b] >= start[b + 1]) return;
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

// colsum_partial for rows of whole packs (cols a multiple of VEC): a block of 256 threads
// takes 32 packs of columns (a warp reads 512 contiguous bytes of a row) by 8 lanes of rows,
// each lane summing every 8th row of the chunk in order, the lanes then added in order
// through shared memory. One 2-byte column a thread, as above, left most of HBM's bandwidth
// idle (GPT-2's bias gradients at half of it, a third of the warps resident).
#define CS_LANES 8
__global__ void __launch_bounds__(256)
    colsum_partial_v(float* part, const X* x, long rows, int cols, int rows_per_chunk) {
    __shared__ float lanes[CS_LANES][WARP * VEC];
    int tx = threadIdx.x % WARP, ty = threadIdx.x / WARP;
    int c0 = (blockIdx.x * WARP + tx) * VEC;
    int chunk = blockIdx.y;
    long r0 = (long)chunk * rows_per_chunk;
    long r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    float s[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) s[k] = 0.0f;
    if (c0 < cols) {
#pragma unroll 4
        for (long r = r0 + ty; r < r1; r += CS_LANES) {
            Pack p;
            p.u = *(const uint4*)(x + r * cols + c0);
#pragma unroll
            for (int k = 0; k < VEC; k++) s[k] += ld(p.x[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) lanes[ty][tx * VEC + k] = s[k];
    __syncthreads();
    for (int c = threadIdx.x; c < WARP * VEC; c += blockDim.x) {
        int col = blockIdx.x * WARP * VEC + c;
        if (col >= cols) continue;
        float t = 0.0f;
        for (int y = 0; y < CS_LANES; y++) t += lanes[y][c];
        part[(long)chunk * cols + col] = t;
    }
}

// out[c] += Σ_k part[k][c], k in order.
__global__ void sum_partials(float* out, const float* part, int chunks, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float s = 0.0f;
    for (int k = 0; k < chunks; k++) s += part[(long)k * cols + c];
    out[c] += s;
}

}  // extern "C"

// Vectorised norms for rows of C = a multiple of VEC elements: a thread holds NP packs (16
// bytes each) of the row in registers, so a row crosses HBM once each way, in 16-byte
// accesses. The block is the row's threads (a multiple of a warp, ≤ 256 by `NP`'s choice).
// The scalar kernels above take the shapes these do not.

// Σ a and Σ b over the block at once (one set of barriers for both).
__device__ float2 block_sum2(float a, float b) {
    __shared__ float2 part2[WARP];
    __shared__ float2 total2;
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane == 0) part2[w] = make_float2(a, b);
    __syncthreads();
    if (w == 0) {
        float2 s = lane < (blockDim.x + WARP - 1) / WARP ? part2[lane] : make_float2(0.0f, 0.0f);
        s.x = warp_sum(s.x);
        s.y = warp_sum(s.y);
        if (lane == 0) total2 = s;
    }
    __syncthreads();
    float2 r = total2;
    __syncthreads();
    return r;
}

// One row's norm forward by `n` threads, this one `t` of them: a warp (WARP_ROW, its sums
// warp shuffles, with no block barrier between a row's loads and its stores) or a block.
// The row's loads are all issued before the first sum waits: the row's latency once. A
// block row's thread, with few packs, issues its weight and bias with them; a warp row's
// lane reads them, the same for every row and so in cache, where they are used, which keeps
// a lane of sixteen packs in registers.
//
// A warp a row runs rows of at most 16 packs a lane (on an H200 under ncu, Llama 3.2 1B's
// 2048-wide rows 1.05 -> 0.82 ms a step, GPT-2's 768 0.70 -> 0.54 against a block a row).
// The backward stays a block a row (norm_bwd_packs): one warp a row, its weight gradient
// summed per lane and the warps added in order through shared memory, ran 1.5x slower.
template <int NP, bool WARP_ROW>
__device__ __forceinline__ void norm_fwd_row(X* out, float* mean, float* rstd, const X* inp,
                                             const X* w, const X* b, long row, int C,
                                             float eps, int rms, int t, int n) {
    auto sum = [](float v) {
        if constexpr (WARP_ROW) return warp_sum(v);
        else return block_sum(v);
    };
    int packs = C / VEC;
    Pack xp[NP], wp[NP], bp[NP];
#pragma unroll
    for (int p = 0; p < NP; p++) {
        int pk = t + p * n;
        if (pk < packs) {
            xp[p].u = *(const uint4*)(inp + row * C + pk * VEC);
            if constexpr (!WARP_ROW) {
                wp[p].u = *(const uint4*)(w + pk * VEC);
                if (b) bp[p].u = *(const uint4*)(b + pk * VEC);
            }
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int p = 0; p < NP; p++)
        if (t + p * n < packs)
#pragma unroll
            for (int k = 0; k < VEC; k++) s += ld(xp[p].x[k]);
    float m = rms ? 0.0f : sum(s) / C;
    float q = 0.0f;
#pragma unroll
    for (int p = 0; p < NP; p++)
        if (t + p * n < packs)
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                float d = ld(xp[p].x[k]) - m;
                q += d * d;
            }
    float r = rsqrtf(sum(q) / C + eps);
#pragma unroll
    for (int p = 0; p < NP; p++) {
        int pk = t + p * n;
        if (pk < packs) {
            if constexpr (WARP_ROW) {
                wp[p].u = *(const uint4*)(w + pk * VEC);
                if (b) bp[p].u = *(const uint4*)(b + pk * VEC);
            }
            Pack op;
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                float y = (ld(xp[p].x[k]) - m) * r * ld(wp[p].x[k]);
                if (b) y += ld(bp[p].x[k]);
                op.x[k] = st(y);
            }
            *(uint4*)(out + row * C + pk * VEC) = op.u;
        }
    }
    if (t == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// The input gradient (added into dinp) and, per block, the weight and bias gradients of a
// chunk of `rows_per_chunk` rows: part[chunk][c] (dw) and part[chunks + chunk][c] (db),
// summed in order by `sum_partials_2d`, so the result does not depend on scheduling.
template <int NP>
__device__ void norm_bwd_packs(X* dinp, float* part, const X* dout, const X* inp, const X* w,
                               const float* mean, const float* rstd, long rows, int C,
                               int rows_per_chunk, int rms, int want_db) {
    int packs = C / VEC;
    float dw[NP][VEC], db[NP][VEC];
    Pack wp[NP];
#pragma unroll
    for (int p = 0; p < NP; p++) {
        int pk = threadIdx.x + p * blockDim.x;
        if (pk < packs) wp[p].u = *(const uint4*)(w + pk * VEC);
#pragma unroll
        for (int k = 0; k < VEC; k++) dw[p][k] = db[p][k] = 0.0f;
    }
    long r0 = (long)blockIdx.x * rows_per_chunk;
    long r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
    // Row r's x, dy, the residual gradient it adds into and its mean and rstd, loaded one row
    // ahead: the next row's loads are in flight while this row waits in its reduction, so a
    // block keeps HBM busy instead of paying one memory latency a row (the statistics too:
    // read where they were used, they cost a latency a row, GPT 6.6B's rows of 4096 64 us a
    // norm under ncu on an H200).
    Pack xp[NP], yp[NP], gp[NP], xn[NP], yn[NP], gn[NP];
    float mc = 0.0f, rc = 0.0f, mn = 0.0f, rn = 0.0f;
    auto load = [&](long r, Pack* x, Pack* y, Pack* gr, float& mu, float& rsd) {
        mu = mean[r];
        rsd = rstd[r];
#pragma unroll
        for (int p = 0; p < NP; p++) {
            int pk = threadIdx.x + p * blockDim.x;
            if (pk < packs) {
                x[p].u = *(const uint4*)(inp + r * C + pk * VEC);
                y[p].u = *(const uint4*)(dout + r * C + pk * VEC);
                gr[p].u = *(const uint4*)(dinp + r * C + pk * VEC);
            }
        }
    };
    if (r0 < r1) load(r0, xp, yp, gp, mc, rc);
    for (long r = r0; r < r1; r++) {
        if (r + 1 < r1) load(r + 1, xn, yn, gn, mn, rn);
        float m = mc, rs = rc;
        float s1 = 0.0f, s2 = 0.0f;  // Σ dŷ, Σ dŷ·x̂ with dŷ = dy·w
#pragma unroll
        for (int p = 0; p < NP; p++) {
            if (threadIdx.x + p * blockDim.x < packs) {
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    float dy = ld(yp[p].x[k]);
                    float xh = (ld(xp[p].x[k]) - m) * rs;
                    float dn = dy * ld(wp[p].x[k]);
                    s1 += dn;
                    s2 += dn * xh;
                    dw[p][k] += dy * xh;
                    db[p][k] += dy;
                }
            }
        }
        float2 t = block_sum2(s1, s2);
        s1 = t.x / C;
        s2 = t.y / C;
#pragma unroll
        for (int p = 0; p < NP; p++) {
            int pk = threadIdx.x + p * blockDim.x;
            if (pk < packs) {
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    float dn = ld(yp[p].x[k]) * ld(wp[p].x[k]);
                    float xh = (ld(xp[p].x[k]) - m) * rs;
                    float g = rms ? (dn - xh * s2) * rs : (dn - s1 - xh * s2) * rs;
                    gp[p].x[k] = st(ld(gp[p].x[k]) + g);
                }
                *(uint4*)(dinp + r * C + pk * VEC) = gp[p].u;
            }
        }
#pragma unroll
        for (int p = 0; p < NP; p++) {
            xp[p] = xn[p];
            yp[p] = yn[p];
            gp[p] = gn[p];
        }
        mc = mn;
        rc = rn;
    }
    // A pack's partials as 16-byte stores (VEC is a multiple of 4 and C of VEC).
#pragma unroll
    for (int p = 0; p < NP; p++) {
        int pk = threadIdx.x + p * blockDim.x;
        if (pk < packs) {
            float* pw = part + (long)blockIdx.x * C + pk * VEC;
            float* pb = part + ((long)gridDim.x + blockIdx.x) * C + pk * VEC;
#pragma unroll
            for (int k = 0; k < VEC; k += 4) {
                *(float4*)(pw + k) = make_float4(dw[p][k], dw[p][k + 1], dw[p][k + 2], dw[p][k + 3]);
                // Without a bias (RMSNorm) its partials would be written for nothing.
                if (want_db)
                    *(float4*)(pb + k) =
                        make_float4(db[p][k], db[p][k + 1], db[p][k + 2], db[p][k + 3]);
            }
        }
    }
}

extern "C" {

#define NORM_WARP(NP)                                                                       \
    __global__ void __launch_bounds__(128)                                                  \
        norm_fwd_w##NP(X* out, float* mean, float* rstd, const X* inp, const X* w,          \
                       const X* b, long rows, int C, float eps, int rms) {                  \
        long row = (long)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;              \
        if (row < rows)                                                                     \
            norm_fwd_row<NP, true>(out, mean, rstd, inp, w, b, row, C, eps, rms,            \
                                   threadIdx.x % WARP, WARP);                               \
    }

NORM_WARP(1)
NORM_WARP(2)
NORM_WARP(4)
NORM_WARP(8)
NORM_WARP(16)

#define NORM_PACKS(NP)                                                                      \
    __global__ void norm_fwd_v##NP(X* out, float* mean, float* rstd, const X* inp,         \
                                   const X* w, const X* b, int C, float eps, int rms) {    \
        norm_fwd_row<NP, false>(out, mean, rstd, inp, w, b, blockIdx.x, C, eps, rms,        \
                                threadIdx.x, blockDim.x);                                   \
    }                                                                                       \
    __global__ void norm_bwd_v##NP(X* dinp, float* part, const X* dout, const X* inp,      \
                                   const X* w, const float* mean, const float* rstd,       \
                                   long rows, int C, int rows_per_chunk, int rms,          \
                                   int want_db) {                                          \
        norm_bwd_packs<NP>(dinp, part, dout, inp, w, mean, rstd, rows, C, rows_per_chunk,   \
                           rms, want_db);                                                   \
    }

NORM_PACKS(1)
NORM_PACKS(2)
NORM_PACKS(4)

// out[c] += Σ_k part[k][c], k in order, for many chunks: a block of 512 threads takes 32
// columns; its 16 warps each sum every 16th partial, then the first warp adds the 16 sums
// in order.
__global__ void sum_partials_2d(float* out, const float* part, int chunks, int cols) {
    __shared__ float acc[16][33];
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    int c = blockIdx.x * WARP + lane;
    float s = 0.0f;
    if (c < cols)
        for (int k = w; k < chunks; k += 16) s += part[(long)k * cols + c];
    acc[w][lane] = s;
    __syncthreads();
    if (w == 0 && c < cols) {
        float t = 0.0f;
        for (int k = 0; k < 16; k++) t += acc[k][lane];
        out[c] += t;
    }
}

// ---- MLP activations ----------------------------------------------------------------------

// The activations' transcendentals. A 16-bit type keeps 8 (bf16) or 11 (fp16) bits of
// mantissa, so the hardware exponential's error of a few fp32 units in the last place
// never reaches what is stored, at a fraction of the accurate one's instructions (these
// kernels should move bytes, not wait on arithmetic). fp32 training keeps the accurate
// functions, which its numerics hold to 1e-7.
__device__ __forceinline__ float act_exp(float x) { return sizeof(X) == 2 ? __expf(x) : expf(x); }

// a / b where b = 1 + an exponential, for the same reason: the approximate division (a
// reciprocal and a product, within 2 ulp of fp32, which a 16-bit result does not keep)
// rather than the rounded one's dozen instructions. b beyond 2¹²⁶ (its exponential overflowed)
// gives 0, which is the quotient's limit.
__device__ __forceinline__ float act_div(float a, float b) {
    return sizeof(X) == 2 ? __fdividef(a, b) : a / b;
}

// GELU with the tanh approximation (GPT-2's `gelu_new`): 0.5·x·(1 + tanh(u)) with
// u = √(2/π)·(x + 0.044715·x³). In 16-bit training it is taken as x·σ(2u), the same
// function, one hardware exponential and one division; fp32 keeps tanhf.
__device__ __forceinline__ float gelu_u(float x) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    return k * (x + 0.044715f * x * x * x);
}

__device__ __forceinline__ float gelu(float x) {
    float u = gelu_u(x);
    if (sizeof(X) == 2) return act_div(x, 1.0f + act_exp(-2.0f * u));
    return 0.5f * x * (1.0f + tanhf(u));
}

// Element i's row and column in rows of `cols`, of n elements: 32-bit division where n fits
// (64-bit division is a long software sequence, several times a 32-bit one's, and these
// kernels divide once a pack).
__device__ __forceinline__ void row_col(long i, int cols, long n, long* r, int* c) {
    if (n <= 0xffffffffL) {
        *r = (unsigned)i / (unsigned)cols;
        *c = (unsigned)i % (unsigned)cols;
    } else {
        *r = i / cols;
        *c = i % cols;
    }
}

__device__ __forceinline__ int column_of(long i, int cols, long n) {
    long r;
    int c;
    row_col(i, cols, n, &r, &c);
    return c;
}

// out = gelu(inp + bias[column]) over rows of `cols` (bias may be null): the first MLP
// product's bias is added here rather than in a pass of its own, and not stored, so the
// backward adds it again as it reads. VEC elements a thread; a pack never straddles two
// rows when `cols` is a multiple of VEC (else element by element).
__global__ void gelu_fwd(X* out, const X* inp, const X* bias, int cols, long n) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n && cols % VEC == 0) {
        Pack p, pb;
        p.u = *(const uint4*)(inp + i);
        if (bias) pb.u = *(const uint4*)(bias + column_of(i, cols, n));
#pragma unroll
        for (int k = 0; k < VEC; k++)
            p.x[k] = st(gelu(ld(p.x[k]) + (bias ? ld(pb.x[k]) : 0.0f)));
        *(uint4*)(out + i) = p.u;
    } else {
        for (long j = i; j < n && j < i + VEC; j++)
            out[j] = st(gelu(ld(inp[j]) + (bias ? ld(bias[j % cols]) : 0.0f)));
    }
}

// d gelu / dx = 0.5·(1 + t) + 0.5·x·(1 − t²)·du/dx with t = tanh(u); with σ = σ(2u),
// t = 2σ − 1, so the 16-bit form is σ + 2·x·σ·(1 − σ)·du/dx.
__device__ __forceinline__ float gelu_grad(float x) {
    const float k = 0.7978845608028654f;
    float u = gelu_u(x);
    float du = k * (1.0f + 3.0f * 0.044715f * x * x);
    if (sizeof(X) == 2) {
        float sg = act_div(1.0f, 1.0f + act_exp(-2.0f * u));
        return sg + 2.0f * x * sg * (1.0f - sg) * du;
    }
    float t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}

// dinp = gelu'(inp + bias[column]) · dout, the bias as gelu_fwd added it. VEC elements a
// thread.
__global__ void gelu_bwd(X* dinp, const X* inp, const X* bias, int cols, const X* dout, long n) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    if (i + VEC <= n && cols % VEC == 0) {
        Pack px, pd, pb;
        px.u = *(const uint4*)(inp + i);
        pd.u = *(const uint4*)(dout + i);
        if (bias) pb.u = *(const uint4*)(bias + column_of(i, cols, n));
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float x = ld(px.x[k]) + (bias ? ld(pb.x[k]) : 0.0f);
            px.x[k] = st(gelu_grad(x) * ld(pd.x[k]));
        }
        *(uint4*)(dinp + i) = px.u;
    } else {
        for (long j = i; j < n && j < i + VEC; j++) {
            float x = ld(inp[j]) + (bias ? ld(bias[j % cols]) : 0.0f);
            dinp[j] = st(gelu_grad(x) * ld(dout[j]));
        }
    }
}

// h[n, 0:F] is the gate, h[n, F:2F] the up projection: out = silu(gate) · up. VEC
// elements of a row a thread (F is a multiple of VEC; else one by one).
__device__ __forceinline__ float silu(float g) { return act_div(g, 1.0f + act_exp(-g)); }

__global__ void swiglu_fwd(X* out, const X* h, long rows, int F) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    long n = rows * F;
    if (i >= n) return;
    long r;
    int f;
    row_col(i, F, n, &r, &f);
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
    float sg = act_div(1.0f, 1.0f + act_exp(-g));
    *dg = d * u * sg * (1.0f + g * (1.0f - sg));
    *du = d * g * sg;
}

__global__ void swiglu_bwd(X* dh, const X* h, const X* dout, long rows, int F) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * VEC;
    long n = rows * F;
    if (i >= n) return;
    long r;
    int f;
    row_col(i, F, n, &r, &f);
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
// and each key/value head repeated for the H / G query heads that share it, or, when
// `grouped` (cuDNN's attention, which reads a group's head once through its strides),
// written at the group's first query head only: the copies would be bytes nobody reads.
__global__ void qkv_split(X* q, X* k, X* v, const X* qkv, int B, int T, int H, int G, int D,
                          const float* rcos, const float* rsin, int grouped) {
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
    bool kv = !grouped || h % (H / G) == 0;
    if (rcos) {
        unsigned half = D / 2;
        unsigned j = d < half ? d : d - half;
        float c = rcos[t * half + j], s = rsin[t * half + j];
        float qo = d < half ? -ld(qs[d + half]) : ld(qs[d - half]);
        q[i] = st(ld(qs[d]) * c + qo * s);
        if (kv) {
            float ko = d < half ? -ld(ks[d + half]) : ld(ks[d - half]);
            k[i] = st(ld(ks[d]) * c + ko * s);
        }
    } else {
        q[i] = qs[d];
        if (kv) k[i] = ks[d];
    }
    if (kv) v[i] = vs[d];
}

// The inverse of qkv_split for gradients: un-rotate dq and dk, and sum the gradients of the
// query heads that share a key/value head, in head order; when `grouped`, a group's
// gradient is whole at its first query head (cuDNN sums the group) and the others are
// not read. One thread per element of dqkv.
__global__ void qkv_merge_grad(X* dqkv, const X* dq, const X* dk, const X* dv, int B, int T,
                               int H, int G, int D, const float* rcos, const float* rsin,
                               int grouped) {
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
    for (unsigned r = 0; r < (grouped ? 1u : rep); r++) {
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

// qkv_split and qkv_merge_grad a rope pair of 16-byte packs a thread: the pack at d0 of a
// head's first half and its partner at d0 + D/2, for head sizes whose halves are whole
// packs. The pair shares its angles, so each element is read once and the angles' row once
// for both halves (as whole packs too), and the indices are 32-bit (the engine refuses
// tensors of 2³¹ elements). Llama 3.2 1B's split and merge, a pack a thread with each pack's
// partner read again and its angles one float at a time, ran at a third of HBM bandwidth
// under ncu (1.0 and 1.5 ms a step on an H200).
__device__ __forceinline__ void load_angles(float* c, float* s, const float* rcos,
                                            const float* rsin, unsigned at) {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) {
        *(float4*)(c + k) = *(const float4*)(rcos + at + k);
        *(float4*)(s + k) = *(const float4*)(rsin + at + k);
    }
}

// Rotates a pair in place, rounded to the storage type. Forward: lo·cos − hi·sin,
// hi·cos + lo·sin; the transpose (backward): lo·cos + hi·sin, hi·cos − lo·sin.
__device__ __forceinline__ void rope_pair(Pack& lo, Pack& hi, const float* c, const float* s,
                                          bool fwd) {
    float sign = fwd ? -1.0f : 1.0f;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        float a = ld(lo.x[k]), b = ld(hi.x[k]);
        lo.x[k] = st(a * c[k] + sign * b * s[k]);
        hi.x[k] = st(b * c[k] - sign * a * s[k]);
    }
}

// A pack of row `src` at element `at`, plus the same pack of `bias` where there is one
// (rounded to the storage type, as a separate bias pass would leave it).
__device__ __forceinline__ Pack pack_plus(const X* src, const X* bias, unsigned at) {
    Pack p;
    p.u = *(const uint4*)(src + at);
    if (bias) {
        Pack b;
        b.u = *(const uint4*)(bias + at);
#pragma unroll
        for (int e = 0; e < VEC; e++) p.x[e] = st(ld(p.x[e]) + ld(b.x[e]));
    }
    return p;
}

// The product's bias is added here, before rope rotates q and k, rather than in a pass
// over qkv of its own.
__global__ void qkv_split_v(X* q, X* k, X* v, const X* qkv, int B, int T, int H, int G, int D,
                            const float* rcos, const float* rsin, const X* bias, int grouped) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned half = D / 2, pairs = half / VEC;
    if (i >= (unsigned)B * H * T * pairs) return;
    unsigned d0 = i % pairs * VEC;
    unsigned rest = i / pairs;
    unsigned t = rest % T;
    rest /= T;
    unsigned h = rest % H, b = rest / H;
    unsigned g = h / (H / G);
    const X* row = qkv + (b * T + t) * (H + 2 * G) * D;
    unsigned qa = h * D + d0, ka = (H + g) * D + d0, va = (H + G + g) * D + d0;
    bool kv = !grouped || h % (H / G) == 0;
    Pack ql = pack_plus(row, bias, qa), qh = pack_plus(row, bias, qa + half);
    Pack kl, kh, vl, vh;
    if (kv) {
        kl = pack_plus(row, bias, ka);
        kh = pack_plus(row, bias, ka + half);
        vl = pack_plus(row, bias, va);
        vh = pack_plus(row, bias, va + half);
    }
    if (rcos) {
        float c[VEC], s[VEC];
        load_angles(c, s, rcos, rsin, t * half + d0);
        rope_pair(ql, qh, c, s, true);
        if (kv) rope_pair(kl, kh, c, s, true);
    }
    unsigned at = ((b * H + h) * T + t) * D + d0;
    *(uint4*)(q + at) = ql.u;
    *(uint4*)(q + at + half) = qh.u;
    if (kv) {
        *(uint4*)(k + at) = kl.u;
        *(uint4*)(k + at + half) = kh.u;
        *(uint4*)(v + at) = vl.u;
        *(uint4*)(v + at + half) = vh.u;
    }
}

__global__ void qkv_merge_grad_v(X* dqkv, const X* dq, const X* dk, const X* dv, int B, int T,
                                 int H, int G, int D, const float* rcos, const float* rsin,
                                 int grouped) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned half = D / 2, pairs = half / VEC, heads = H + 2 * G;
    if (i >= (unsigned)B * T * heads * pairs) return;
    unsigned d0 = i % pairs * VEC;
    unsigned rest = i / pairs;
    unsigned head = rest % heads, bt = rest / heads;
    unsigned t = bt % T, b = bt / T;
    bool is_v = head >= H + G;
    unsigned first = head < H ? head : (is_v ? head - H - G : head - H) * (H / G);
    unsigned rep = head < H || grouped ? 1 : H / G;
    const X* base = head < H ? dq : (is_v ? dv : dk);
    bool rot = rcos && !is_v;
    float c[VEC], s[VEC];
    if (rot) load_angles(c, s, rcos, rsin, t * half + d0);
    float lo[VEC], hi[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) lo[k] = hi[k] = 0.0f;
    for (unsigned r = 0; r < rep; r++) {
        const X* src = base + ((b * H + first + r) * T + t) * D + d0;
        Pack xl, xh;
        xl.u = *(const uint4*)src;
        xh.u = *(const uint4*)(src + half);
        if (rot) rope_pair(xl, xh, c, s, false);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            lo[k] += ld(xl.x[k]);
            hi[k] += ld(xh.x[k]);
        }
    }
    Pack ol, oh;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        ol.x[k] = st(lo[k]);
        oh.x[k] = st(hi[k]);
    }
    X* out = dqkv + (bt * heads + head) * D + d0;
    *(uint4*)out = ol.u;
    *(uint4*)(out + half) = oh.u;
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

// Adds v to a running maximum m and sum s = Σ exp(x − m) (online rescaling).
__device__ __forceinline__ void online_add(float v, float& m, float& s) {
    float mn = fmaxf(m, v);
    s = s * exp_from(m, mn) + expf(v - mn);
    m = mn;
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
        online_add(ld(x[j]) * scale, m, s);
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
// logits overwritten with their gradient (softmax − onehot)·dscale. A row of whole 16-byte
// packs (every row then starts aligned) is read and written a pack a thread: the logits are
// the largest tensor of a step, and 2-byte accesses reach well under half the bandwidth.
__global__ void cross_entropy(X* logits, float* loss, const int* target, int V, float dscale) {
    long row = blockIdx.x;
    X* x = logits + row * V;
    int packs = V % VEC == 0 ? V / VEC : 0;
    // One pass for the maximum and the sum together (online rescaling), one to write. The
    // packs' exponentials take act_exp (the hardware one in 16-bit training), as the
    // activations do: the loss and the stored gradient cannot tell them apart.
    float m = -INFINITY, s = 0.0f;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        Pack pk;
        pk.u = *(const uint4*)(x + (long)p * VEC);
        float pm = -INFINITY;
#pragma unroll
        for (int k = 0; k < VEC; k++) pm = fmaxf(pm, ld(pk.x[k]));
        float mn = fmaxf(m, pm), acc = 0.0f;
#pragma unroll
        for (int k = 0; k < VEC; k++) acc += act_exp(ld(pk.x[k]) - mn);
        s = s * exp_from(m, mn) + acc;
        m = mn;
    }
    for (int j = packs * VEC + threadIdx.x; j < V; j += blockDim.x) online_add(ld(x[j]), m, s);
    float mx = block_max(m);
    s = block_sum(s * exp_from(m, mx));
    int tgt = target[row];
    float lt = ld(x[tgt]);
    __syncthreads();
    if (threadIdx.x == 0) loss[row] = mx + logf(s) - lt;
    float inv = 1.0f / s;
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        Pack pk;
        pk.u = *(const uint4*)(x + (long)p * VEC);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int j = p * VEC + k;
            float pj = act_exp(ld(pk.x[k]) - mx) * inv;
            pk.x[k] = st((pj - (j == tgt ? 1.0f : 0.0f)) * dscale);
        }
        *(uint4*)(x + (long)p * VEC) = pk.u;
    }
    for (int j = packs * VEC + threadIdx.x; j < V; j += blockDim.x) {
        float pj = expf(ld(x[j]) - mx) * inv;
        x[j] = st((pj - (j == tgt ? 1.0f : 0.0f)) * dscale);
    }
}

// Vocabulary-parallel cross-entropy (tensor parallelism): each rank holds the logits of its
// vocabulary rows [v0, v0 + V). Per token: this share's maximum, Σ exp(x − max), and the
// target's logit if the target is one of this rank's (else 0), as stats[row·3 + 0..3].
__global__ void ce_stats(const X* logits, float* stats, const int* target, int V, int v0) {
    long row = blockIdx.x;
    const X* x = logits + row * V;
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) online_add(ld(x[j]), m, s);
    float mx = block_max(m);
    s = block_sum(s * exp_from(m, mx));
    int t = target[row] - v0;
    if (threadIdx.x == 0) {
        stats[row * 3 + 0] = mx;
        stats[row * 3 + 1] = s;
        stats[row * 3 + 2] = (t >= 0 && t < V) ? ld(x[t]) : 0.0f;
    }
}

// Every rank's stats, gathered as [R][n][3] → each token's logsumexp over the whole
// vocabulary and its loss, in rank order (the same on every rank).
__global__ void ce_combine(const float* all, float* lse, float* loss, long n, int R) {
    long row = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (row >= n) return;
    float mx = -INFINITY;
    for (int r = 0; r < R; r++) mx = fmaxf(mx, all[(r * n + row) * 3]);
    float s = 0.0f, tl = 0.0f;
    for (int r = 0; r < R; r++) {
        const float* a = all + (r * n + row) * 3;
        s += a[1] * exp_from(a[0], mx);
        tl += a[2];
    }
    float l = mx + logf(s);
    lse[row] = l;
    loss[row] = l - tl;
}

// This rank's logits overwritten with their gradient (softmax − onehot)·dscale.
__global__ void ce_grad(X* logits, const float* lse, const int* target, int V, int v0,
                        float dscale) {
    long row = blockIdx.x;
    X* x = logits + row * V;
    float l = lse[row];
    int t = target[row] - v0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float pj = expf(ld(x[j]) - l);
        x[j] = st((pj - (j == t ? 1.0f : 0.0f)) * dscale);
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
// update) on fp32 master weights, refreshing the compute copy `wx` (null in fp32); `gscale`
// unscales and clips the gradient. Over a contiguous range [lo, lo + n) of the flat
// buffers in one launch (w, g, wx start at lo; m and v at the range's start): weight decay
// per 64-element block, as decay[k] says for block k of the whole buffer (every tensor
// starts on a block), so one launch serves every tensor where a launch a tensor left the
// GPU idle between small ones. `nonfinite` (null where the step took the gradients' norm,
// which finds them) is set to 1 by any non-finite gradient: with `grad_clip = 0` the update
// is the step's only pass over the gradients, so it is where a diverged run shows.
__device__ __forceinline__ float adamw_one(float& w, float g, float& m, float& v, float wdi,
                                           float lr, float b1, float b2, float eps, float bc1,
                                           float bc2_sqrt) {
    float p = w * (1.0f - lr * wdi);
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    p -= (lr / bc1) * m / (sqrtf(v) / bc2_sqrt + eps);
    w = p;
    return p;
}

// Four elements a thread, moved as 16-byte loads and stores (the compute copy as one 8-byte
// store in 16-bit storage): the update is bound by memory, ~30 bytes a parameter, and
// scalar 4-byte accesses left a fifth of the bandwidth unused. `vec` is set by the host when
// lo is a multiple of 4 (every buffer starts 256-byte aligned), else the thread walks its
// four elements one by one. A decay block (64) never straddles a group of four.
__global__ void adamw_flat(float* w, X* wx, const float* g, float* m, float* v, long n, long lo,
                           const unsigned char* decay, float lr, float b1, float b2, float eps,
                           float wd, float bc1, float bc2_sqrt, float gscale, int vec,
                           float* nonfinite) {
    long i = (blockIdx.x * (long)blockDim.x + threadIdx.x) * 4;
    if (i >= n) return;
    if (vec && i + 4 <= n) {
        float wdi = decay[(lo + i) >> 6] ? wd : 0.0f;
        float4 W = *(float4*)(w + i), G = *(const float4*)(g + i);
        float4 M = *(float4*)(m + i), V = *(float4*)(v + i);
        if (nonfinite && !(isfinite(G.x) && isfinite(G.y) && isfinite(G.z) && isfinite(G.w)))
            *nonfinite = 1.0f;
        float o0 = adamw_one(W.x, G.x * gscale, M.x, V.x, wdi, lr, b1, b2, eps, bc1, bc2_sqrt);
        float o1 = adamw_one(W.y, G.y * gscale, M.y, V.y, wdi, lr, b1, b2, eps, bc1, bc2_sqrt);
        float o2 = adamw_one(W.z, G.z * gscale, M.z, V.z, wdi, lr, b1, b2, eps, bc1, bc2_sqrt);
        float o3 = adamw_one(W.w, G.w * gscale, M.w, V.w, wdi, lr, b1, b2, eps, bc1, bc2_sqrt);
        *(float4*)(w + i) = W;
        *(float4*)(m + i) = M;
        *(float4*)(v + i) = V;
        if (wx) {
#if PLANC_X == 0
            *(float4*)(wx + i) = W;
#else
            uint2 packed;
            packed.x = (unsigned)st(o0) | ((unsigned)st(o1) << 16);
            packed.y = (unsigned)st(o2) | ((unsigned)st(o3) << 16);
            *(uint2*)(wx + i) = packed;
#endif
        }
        return;
    }
    for (long j = i; j < n && j < i + 4; j++) {
        float wdi = decay[(lo + j) >> 6] ? wd : 0.0f;
        float wj = w[j], mj = m[j], vj = v[j];
        if (nonfinite && !isfinite(g[j])) *nonfinite = 1.0f;
        float p = adamw_one(wj, g[j] * gscale, mj, vj, wdi, lr, b1, b2, eps, bc1, bc2_sqrt);
        w[j] = wj;
        m[j] = mj;
        v[j] = vj;
        if (wx) wx[j] = st(p);
    }
}

// SGD with decoupled weight decay over a contiguous range, as adamw_flat.
__global__ void sgd_flat(float* w, X* wx, const float* g, long n, long lo,
                         const unsigned char* decay, float lr, float wd, float gscale,
                         float* nonfinite) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (nonfinite && !isfinite(g[i])) *nonfinite = 1.0f;
    float wdi = decay[(lo + i) >> 6] ? wd : 0.0f;
    float p = w[i] * (1.0f - lr * wdi) - lr * g[i] * gscale;
    w[i] = p;
    if (wx) wx[i] = st(p);
}

}  // extern "C"

// ---- fused causal attention (flash) -------------------------------------------------------
//
// softmax(scale·QKᵀ, causal)·V without the T×T scores, FlashAttention-2's way: forward keeps
// the output and each row's logsumexp L (natural log, fp32, [B·H·T]); backward recomputes
// the probabilities a tile at a time from q, k and L, with D_i = Σ_d O·dO (from
// `flash_bwd_dot`, or the tensor-core dq kernel, which runs first). q, k and v are [B, H, T, D]; the output and its gradient are merged,
// [B, T, H·D], as the projection after attention reads them (no permutation kernels); dq,
// dk and dv go to [B, H, T, D] or straight into the merged qkv gradient, at strides `gbs`
// (batch), `ghs` (head) and `grs` (row).
//
// Backward is two kernels, dk/dv (one block per key tile, over the query tiles at or after
// it) and dq (one block per query tile, over the key tiles up to it), rather than one that
// adds dq with float atomics: the products for S and dP are computed twice, but every sum
// runs in a fixed order, so a step does not depend on scheduling (see the top of the file).
//
// The scalar kernels (one warp per row, exact expf) serve fp32 and head sizes the
// tensor-core kernels do not take; the tensor-core kernels (mma.sync m16n8k16, 16-bit
// inputs, fp32 accumulation) serve bf16 and fp16.

#define FLASH_MAXD 256
#define FLASH_NC (FLASH_MAXD / WARP)

// A lane's share of a row of D ≤ FLASH_MAXD: elements lane + 32·c.
__device__ __forceinline__ void flash_row(float* r, const X* p, int D) {
    int lane = threadIdx.x % WARP;
#pragma unroll
    for (int c = 0; c < FLASH_NC; c++) {
        int d = lane + c * WARP;
        r[c] = d < D ? ld(p[d]) : 0.0f;
    }
}

// Σ_d r·p over the warp; every lane gets the same sum (the butterfly adds each pair in
// both lanes in the same order).
__device__ __forceinline__ float flash_dot(const float* r, const X* p, int D) {
    int lane = threadIdx.x % WARP;
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < FLASH_NC; c++) {
        int d = lane + c * WARP;
        if (d < D) s += r[c] * ld(p[d]);
    }
    return warp_sum(s);
}

// acc += w·p over the lane's share.
__device__ __forceinline__ void flash_axpy(float* acc, float w, const X* p, int D) {
    int lane = threadIdx.x % WARP;
#pragma unroll
    for (int c = 0; c < FLASH_NC; c++) {
        int d = lane + c * WARP;
        if (d < D) acc[c] += w * ld(p[d]);
    }
}

__device__ __forceinline__ void flash_store(X* p, const float* r, float s, int D) {
    int lane = threadIdx.x % WARP;
#pragma unroll
    for (int c = 0; c < FLASH_NC; c++) {
        int d = lane + c * WARP;
        if (d < D) p[d] = st(r[c] * s);
    }
}

extern "C" {

// D_i = Σ_d O[i, d]·dO[i, d] from the merged output a [B, T, H·D] and its gradient (the
// [B, H, T, D] output is not kept); one warp per row, written in [B, H, T] order.
__global__ void flash_bwd_dot(float* dd, const X* a, const X* da, int B, int T, int H, int D) {
    unsigned row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (row >= (unsigned)B * H * T) return;
    unsigned t = row % T, h = (row / T) % H, b = row / (T * H);
    unsigned long long off = (((unsigned long long)b * T + t) * H + h) * D;
    float s = 0.0f;
    for (int d = threadIdx.x % WARP; d < D; d += WARP) s += ld(a[off + d]) * ld(da[off + d]);
    s = warp_sum(s);
    if (threadIdx.x % WARP == 0) dd[row] = s;
}

// Scalar forward: one warp per query row, the keys in order with the online softmax.
__global__ void flash_fwd(X* o, float* lse, const X* q, const X* k, const X* v, int BH, int T,
                          int H, int D, float scale) {
    unsigned row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (row >= (unsigned)BH * T) return;
    unsigned t = row % T, bh = row / T;
    const unsigned long long base = (unsigned long long)(row - t) * D;
    float qr[FLASH_NC], acc[FLASH_NC];
    flash_row(qr, q + (unsigned long long)row * D, D);
#pragma unroll
    for (int c = 0; c < FLASH_NC; c++) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (unsigned j = 0; j <= t; j++) {
        float s = flash_dot(qr, k + base + (unsigned long long)j * D, D) * scale;
        float mn = fmaxf(m, s);
        float corr = exp_from(m, mn);
        float p = expf(s - mn);
        l = l * corr + p;
#pragma unroll
        for (int c = 0; c < FLASH_NC; c++) acc[c] *= corr;
        flash_axpy(acc, p, v + base + (unsigned long long)j * D, D);
        m = mn;
    }
    flash_store(o + ((unsigned long long)(bh / H) * T * H + (unsigned long long)t * H + bh % H) * D,
                acc, 1.0f / l, D);
    if (threadIdx.x % WARP == 0) lse[row] = m + logf(l);
}

// Scalar dq: one warp per query row, over the keys up to it.
__global__ void flash_bwd_dq(X* dq, long long gbs, int ghs, int grs, const X* q, const X* k,
                             const X* v, const X* dout, const float* lse, const float* dd, int BH,
                             int T, int H, int D, float scale) {
    unsigned row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (row >= (unsigned)BH * T) return;
    unsigned t = row % T, b = row / T / H, h = row / T % H;
    const unsigned long long base = (unsigned long long)(row - t) * D;
    float qr[FLASH_NC], gr[FLASH_NC], acc[FLASH_NC];
    flash_row(qr, q + (unsigned long long)row * D, D);
    flash_row(gr, dout + (((unsigned long long)b * T + t) * H + h) * D, D);
#pragma unroll
    for (int c = 0; c < FLASH_NC; c++) acc[c] = 0.0f;
    const float L = lse[row], Di = dd[row];
    for (unsigned j = 0; j <= t; j++) {
        const X* kj = k + base + (unsigned long long)j * D;
        float p = expf(flash_dot(qr, kj, D) * scale - L);
        float dp = flash_dot(gr, v + base + (unsigned long long)j * D, D);
        flash_axpy(acc, p * (dp - Di), kj, D);
    }
    flash_store(dq + b * gbs + (long long)h * ghs + (long long)t * grs, acc, scale, D);
}

// Scalar dk and dv: one warp per key row, over the queries from it on.
__global__ void flash_bwd_dkdv(X* dk, X* dv, long long gbs, int ghs, int grs, const X* q,
                               const X* k, const X* v, const X* dout, const float* lse,
                               const float* dd, int BH, int T, int H, int D, float scale) {
    unsigned row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (row >= (unsigned)BH * T) return;
    unsigned t = row % T, b = row / T / H, h = row / T % H;
    const unsigned long long base = (unsigned long long)(row - t) * D;
    const unsigned rbase = row - t;
    float kr[FLASH_NC], vr[FLASH_NC], ka[FLASH_NC], va[FLASH_NC];
    flash_row(kr, k + (unsigned long long)row * D, D);
    flash_row(vr, v + (unsigned long long)row * D, D);
#pragma unroll
    for (int c = 0; c < FLASH_NC; c++) ka[c] = va[c] = 0.0f;
    for (unsigned i = t; i < (unsigned)T; i++) {
        const X* qi = q + base + (unsigned long long)i * D;
        const X* gi = dout + (((unsigned long long)b * T + i) * H + h) * D;
        float p = expf(flash_dot(kr, qi, D) * scale - lse[rbase + i]);
        flash_axpy(va, p, gi, D);
        float dp = flash_dot(vr, gi, D);
        flash_axpy(ka, p * (dp - dd[rbase + i]), qi, D);
    }
    const long long at = b * gbs + (long long)h * ghs + (long long)t * grs;
    flash_store(dk + at, ka, scale, D);
    flash_store(dv + at, va, 1.0f, D);
}

}  // extern "C"

// Tensor-core kernels: blocks of 4 warps on tiles of 64 queries × 64 keys, each warp 16
// rows of its block's tile. Tiles are staged in shared memory with cp.async (double
// buffered: the next tile loads while this one is computed), rows padded by 16 bytes so
// the 8 rows an ldmatrix reads fall in distinct banks. Fragment layouts are PTX's for
// m16n8k16: lane = 4g + t holds rows g and g + 8, columns 2t and 2t + 1 of each 8-wide
// accumulator tile, which is also the A operand's layout, so probabilities pass from one
// product to the next in registers. Needs T to be a multiple of 64.
#define FL_TILE 64
#define FL_THREADS 128
#define FL_LOG2E 1.4426950408889634f
#define FL_LN2 0.6931471805599453f

extern __shared__ __attribute__((aligned(16))) unsigned char flash_smem[];

struct __attribute__((aligned(8))) fl2 {
    float x, y;
};

struct __attribute__((aligned(16))) u4 {
    unsigned x[4];
};

// They need Ampere: cp.async and the 16-bit m16n8k16 products came with sm_80.
#if PLANC_X != 0 && __CUDA_ARCH__ >= 800

#if PLANC_X == 1
#define FL_MMA "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#define FL_CVT2 "cvt.rn.bf16x2.f32"
#else
#define FL_MMA "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#define FL_CVT2 "cvt.rn.f16x2.f32"
#endif

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void cp_async16(const void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
}

__device__ __forceinline__ void ldsm_x4_t(unsigned* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p))
                 : "memory");
}

// c += a·b for one 16×8 tile over k = 16.
__device__ __forceinline__ void mma16816(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm(FL_MMA " {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as one register of the storage type, `lo` in the low half (the lower column).
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r;
    asm(FL_CVT2 " %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Σ a·b over 8 values of the storage type each.
__device__ __forceinline__ float dot8(u4 a, u4 b) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++)
        s += ld((X)(a.x[i] & 0xffffu)) * ld((X)(b.x[i] & 0xffffu)) +
             ld((X)(a.x[i] >> 16)) * ld((X)(b.x[i] >> 16));
    return s;
}

__device__ __forceinline__ float exp2_fast(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// FL_TILE rows of D elements, global (row stride `rs`) → shared (stride D + 8), by the
// whole block.
template <int D>
__device__ __forceinline__ void tile_load(X* s, const X* g, int rs = D) {
    constexpr int CH = D / 8;  // 16-byte pieces a row
    for (int i = threadIdx.x; i < FL_TILE * CH; i += FL_THREADS) {
        int r = i / CH, c = i % CH;
        cp_async16(s + r * (D + 8) + c * 8, g + (long long)r * rs + c * 8);
    }
}

// FL_TILE floats, global → shared.
__device__ __forceinline__ void vec_load(float* s, const float* g) {
    if (threadIdx.x < FL_TILE / 4) cp_async16(s + threadIdx.x * 4, g + threadIdx.x * 4);
}

// A operand (16 rows × 16 columns at r0, c0) of a row-major shared tile; with .trans, the B
// operand of a tile stored [k][n] (16 k × 16 n: two 8-wide n tiles, r[0..1] and r[2..3]).
__device__ __forceinline__ const X* frag_a(const X* s, int stride, int r0, int c0) {
    int lane = threadIdx.x % WARP;
    return s + (r0 + lane % 8 + (lane / 8 % 2) * 8) * stride + c0 + lane / 16 * 8;
}

// B operand of a tile stored [n][k] (16 n × 16 k: two 8-wide n tiles, r[0..1], r[2..3]).
__device__ __forceinline__ const X* frag_b(const X* s, int stride, int n0, int k0) {
    int lane = threadIdx.x % WARP;
    return s + (n0 + lane % 8 + lane / 16 * 8) * stride + k0 + (lane / 8 % 2) * 8;
}

// acc[16 × 64] += a[16 × D] · Bᵀ where B [64][D] is a shared tile (stride D + 8) and `a`
// the warp's A fragments, one per 16 columns; with SHARED, rows arow.. of the shared `as`.
template <int D, bool SHARED>
__device__ __forceinline__ void mma_abt(float (*acc)[4], const unsigned (*a)[4], const X* as,
                                        int arow, const X* b) {
    constexpr int S = D + 8;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        unsigned af[4];
        if constexpr (SHARED) {
            ldsm_x4(af, frag_a(as, S, arow, kk * 16));
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) af[i] = a[kk][i];
        }
#pragma unroll
        for (int np = 0; np < FL_TILE / 16; np++) {
            unsigned bf[4];
            ldsm_x4(bf, frag_b(b, S, np * 16, kk * 16));
            mma16816(acc[2 * np], af, bf[0], bf[1]);
            mma16816(acc[2 * np + 1], af, bf[2], bf[3]);
        }
    }
}

// acc[16 × D] += p[16 × 64] · B where p is an accumulator tile (rounded to the storage
// type) and B [64][D] a shared tile.
template <int D>
__device__ __forceinline__ void mma_pb(float (*acc)[4], const float (*p)[4], const X* b) {
    constexpr int S = D + 8;
#pragma unroll
    for (int kc = 0; kc < FL_TILE / 16; kc++) {
        unsigned pa[4] = {pack2(p[2 * kc][0], p[2 * kc][1]), pack2(p[2 * kc][2], p[2 * kc][3]),
                          pack2(p[2 * kc + 1][0], p[2 * kc + 1][1]),
                          pack2(p[2 * kc + 1][2], p[2 * kc + 1][3])};
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            unsigned bf[4];
            ldsm_x4_t(bf, frag_a(b, S, kc * 16, dp * 16));
            mma16816(acc[2 * dp], pa, bf[0], bf[1]);
            mma16816(acc[2 * dp + 1], pa, bf[2], bf[3]);
        }
    }
}

// Writes the warp's 16 rows of a [16 × D] accumulator times `s`; `g` at row 0, rows `rs`
// apart.
template <int D>
__device__ __forceinline__ void store_rows(X* g, int rs, const float (*acc)[4], float s) {
    int lane = threadIdx.x % WARP, r = lane / 4, c = lane % 4 * 2;
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++) {
        *(unsigned*)(g + (long long)r * rs + dn * 8 + c) = pack2(acc[dn][0] * s, acc[dn][1] * s);
        *(unsigned*)(g + (long long)(r + 8) * rs + dn * 8 + c) =
            pack2(acc[dn][2] * s, acc[dn][3] * s);
    }
}

// Forward: one block per (query tile, b·h), the key tiles up to the diagonal in order.
template <int D>
__device__ __forceinline__ void flash_fwd_tc(X* o, float* lse, const X* q, const X* k,
                                             const X* v, int T, int H, float scale) {
    constexpr int S = D + 8;
    X* sQ = (X*)flash_smem;
    X* sK = sQ + FL_TILE * S;      // two buffers
    X* sV = sK + 2 * FL_TILE * S;  // two buffers
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int g = lane / 4, t2 = lane % 4 * 2;
    const int qb = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    const unsigned long long base = (unsigned long long)blockIdx.y * T * D;
    const float sl2 = scale * FL_LOG2E;  // exponentials in base 2

    tile_load<D>(sQ, q + base + (unsigned long long)qb * FL_TILE * D);
    tile_load<D>(sK, k + base);
    tile_load<D>(sV, v + base);
    cp_async_commit();

    unsigned qa[D / 16][4];
    float acc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int j = 0; j <= qb; j++) {
        const int buf = j & 1;
        if (j < qb) {
            const unsigned long long next = base + (unsigned long long)(j + 1) * FL_TILE * D;
            tile_load<D>(sK + (buf ^ 1) * FL_TILE * S, k + next);
            tile_load<D>(sV + (buf ^ 1) * FL_TILE * S, v + next);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) ldsm_x4(qa[kk], frag_a(sQ, S, warp * 16, kk * 16));
        }
        float s[FL_TILE / 8][4];
#pragma unroll
        for (int i = 0; i < FL_TILE / 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
        mma_abt<D, false>(s, qa, nullptr, 0, sK + buf * FL_TILE * S);
        const bool diag = j == qb;
#pragma unroll
        for (int nt = 0; nt < FL_TILE / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = warp * 16 + g + e / 2 * 8, c = nt * 8 + t2 + e % 2;
                s[nt][e] = diag && c > r ? -INFINITY : s[nt][e] * sl2;
            }
        // Online softmax; a row's 64 columns are spread over the 4 lanes of its quad. Every
        // row has a finite maximum from the first tile on (key 0 is never masked).
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = m[h];
#pragma unroll
            for (int nt = 0; nt < FL_TILE / 8; nt++)
                mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float alpha = exp2_fast(m[h] - mx);
            m[h] = mx;
            float rs = 0.0f;
#pragma unroll
            for (int nt = 0; nt < FL_TILE / 8; nt++) {
                s[nt][2 * h] = exp2_fast(s[nt][2 * h] - mx);
                s[nt][2 * h + 1] = exp2_fast(s[nt][2 * h + 1] - mx);
                rs += s[nt][2 * h] + s[nt][2 * h + 1];
            }
            l[h] = l[h] * alpha + rs;  // this lane's share; the quad is summed at the end
#pragma unroll
            for (int dn = 0; dn < D / 8; dn++) {
                acc[dn][2 * h] *= alpha;
                acc[dn][2 * h + 1] *= alpha;
            }
        }
        mma_pb<D>(acc, s, sV + buf * FL_TILE * S);
        __syncthreads();  // the buffer is refilled next iteration
    }
    const unsigned row0 = qb * FL_TILE + warp * 16;
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        inv[h] = 1.0f / l[h];
        if (lane % 4 == 0)
            lse[(unsigned long long)blockIdx.y * T + row0 + g + h * 8] =
                (m[h] + log2f(l[h])) * FL_LN2;
    }
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++) {
        acc[dn][0] *= inv[0];
        acc[dn][1] *= inv[0];
        acc[dn][2] *= inv[1];
        acc[dn][3] *= inv[1];
    }
    const int ors = H * D;  // the merged output's row
    X* ob = o + ((unsigned long long)(blockIdx.y / H) * T * H + blockIdx.y % H) * D;
    store_rows<D>(ob + (unsigned long long)row0 * ors, ors, acc, 1.0f);
}

// dk and dv: one block per (key tile, b·h), the query tiles from the diagonal on. Each warp
// holds 16 keys and computes Sᵀ and dPᵀ (keys × queries), so Pᵀ and dSᵀ are A operands of
// dv += Pᵀ·dO and dk += dSᵀ·Q as they stand. K and V stay in registers for D ≤ 64.
template <int D>
__device__ __forceinline__ void flash_bwd_dkdv_tc(X* dk, X* dv, long long gbs, int ghs, int grs,
                                                  const X* q, const X* k, const X* v,
                                                  const X* dout, const float* lse,
                                                  const float* dd, int T, int H, float scale) {
    constexpr int S = D + 8;
    constexpr bool REGS = D <= 64;
    X* sK = (X*)flash_smem;
    X* sV = sK + FL_TILE * S;
    X* sQ = sV + FL_TILE * S;           // two buffers
    X* sG = sQ + 2 * FL_TILE * S;       // dO, two buffers
    float* sL = (float*)(sG + 2 * FL_TILE * S);  // two buffers
    float* sD = sL + 2 * FL_TILE;                // two buffers
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int g = lane / 4, t2 = lane % 4 * 2;
    const int kb = blockIdx.x;  // the first key tiles have the most queries: they run first
    const int nq = T / FL_TILE;
    const unsigned long long base = (unsigned long long)blockIdx.y * T * D;
    const unsigned long long rbase = (unsigned long long)blockIdx.y * T;
    const float sl2 = scale * FL_LOG2E;
    const unsigned b = blockIdx.y / H, h = blockIdx.y % H;
    const int ors = H * D;  // dO's merged row
    const X* gb = dout + ((unsigned long long)b * T * H + h) * D;

    tile_load<D>(sK, k + base + (unsigned long long)kb * FL_TILE * D);
    tile_load<D>(sV, v + base + (unsigned long long)kb * FL_TILE * D);
    tile_load<D>(sQ, q + base + (unsigned long long)kb * FL_TILE * D);
    tile_load<D>(sG, gb + (unsigned long long)kb * FL_TILE * ors, ors);
    vec_load(sL, lse + rbase + kb * FL_TILE);
    vec_load(sD, dd + rbase + kb * FL_TILE);
    cp_async_commit();

    unsigned ka[REGS ? D / 16 : 1][4], va[REGS ? D / 16 : 1][4];
    float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) dka[i][e] = dva[i][e] = 0.0f;

    for (int i = kb; i < nq; i++) {
        const int buf = (i - kb) & 1;
        if (i + 1 < nq) {
            const unsigned long long next = base + (unsigned long long)(i + 1) * FL_TILE * D;
            const int nb = buf ^ 1;
            tile_load<D>(sQ + nb * FL_TILE * S, q + next);
            tile_load<D>(sG + nb * FL_TILE * S, gb + (unsigned long long)(i + 1) * FL_TILE * ors,
                         ors);
            vec_load(sL + nb * FL_TILE, lse + rbase + (i + 1) * FL_TILE);
            vec_load(sD + nb * FL_TILE, dd + rbase + (i + 1) * FL_TILE);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (REGS && i == kb) {
#pragma unroll
            for (int kk = 0; kk < (REGS ? D / 16 : 1); kk++) {
                ldsm_x4(ka[kk], frag_a(sK, S, warp * 16, kk * 16));
                ldsm_x4(va[kk], frag_a(sV, S, warp * 16, kk * 16));
            }
        }
        const X* qt = sQ + buf * FL_TILE * S;
        const X* gt = sG + buf * FL_TILE * S;
        const float* lt = sL + buf * FL_TILE;
        const float* dt = sD + buf * FL_TILE;
        float s[FL_TILE / 8][4], dp[FL_TILE / 8][4];
#pragma unroll
        for (int n = 0; n < FL_TILE / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        mma_abt<D, !REGS>(s, ka, sK, warp * 16, qt);   // Sᵀ = K·Qᵀ
        mma_abt<D, !REGS>(dp, va, sV, warp * 16, gt);  // dPᵀ = V·dOᵀ
        const bool diag = i == kb;
#pragma unroll
        for (int nt = 0; nt < FL_TILE / 8; nt++) {
            // The two queries of this lane's columns, one 8-byte load each.
            const fl2 lc = *(const fl2*)(lt + nt * 8 + t2), dc = *(const fl2*)(dt + nt * 8 + t2);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = warp * 16 + g + e / 2 * 8, c = nt * 8 + t2 + e % 2;  // key, query
                float l2 = (e % 2 ? lc.y : lc.x) * FL_LOG2E, di = e % 2 ? dc.y : dc.x;
                float p = diag && c < r ? 0.0f : exp2_fast(s[nt][e] * sl2 - l2);
                s[nt][e] = p;
                dp[nt][e] = p * (dp[nt][e] - di);
            }
        }
        mma_pb<D>(dva, s, gt);   // dV += Pᵀ·dO
        mma_pb<D>(dka, dp, qt);  // dK += dSᵀ·Q
        __syncthreads();  // the buffers are refilled next iteration
    }
    const long long at = b * gbs + (long long)h * ghs + (long long)(kb * FL_TILE + warp * 16) * grs;
    store_rows<D>(dk + at, grs, dka, scale);
    store_rows<D>(dv + at, grs, dva, 1.0f);
}

// dq: one block per (query tile, b·h), the key tiles up to the diagonal. Q and dO stay in
// registers for D ≤ 64.
template <int D>
__device__ __forceinline__ void flash_bwd_dq_tc(X* dq, long long gbs, int ghs, int grs,
                                                const X* q, const X* k, const X* v,
                                                const X* dout, const X* o, const float* lse,
                                                float* dd, int T, int H, float scale) {
    constexpr int S = D + 8;
    constexpr bool REGS = D <= 64;
    X* sQ = (X*)flash_smem;
    X* sG = sQ + FL_TILE * S;
    X* sK = sG + FL_TILE * S;      // two buffers
    X* sV = sK + 2 * FL_TILE * S;  // two buffers
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    const int g = lane / 4, t2 = lane % 4 * 2;
    const int qb = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    const unsigned long long base = (unsigned long long)blockIdx.y * T * D;
    const float sl2 = scale * FL_LOG2E;

    const unsigned b = blockIdx.y / H, h = blockIdx.y % H;
    const int ors = H * D;  // the merged row of O and dO
    const unsigned long long mrow = ((unsigned long long)b * T * H + h) * D +
                                    (unsigned long long)qb * FL_TILE * ors;
    tile_load<D>(sQ, q + base + (unsigned long long)qb * FL_TILE * D);
    tile_load<D>(sG, dout + mrow, ors);
    tile_load<D>(sK, k + base);
    tile_load<D>(sV, v + base);
    cp_async_commit();

    const unsigned long long r0 = (unsigned long long)blockIdx.y * T + qb * FL_TILE + warp * 16;
    float L2[2], Di[2];
#pragma unroll
    for (int e = 0; e < 2; e++) L2[e] = lse[r0 + g + e * 8] * FL_LOG2E;
    unsigned qa[REGS ? D / 16 : 1][4], ga[REGS ? D / 16 : 1][4];
    float dqa[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.0f;

    for (int j = 0; j <= qb; j++) {
        const int buf = j & 1;
        if (j < qb) {
            const unsigned long long next = base + (unsigned long long)(j + 1) * FL_TILE * D;
            tile_load<D>(sK + (buf ^ 1) * FL_TILE * S, k + next);
            tile_load<D>(sV + (buf ^ 1) * FL_TILE * S, v + next);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (REGS && j == 0) {
#pragma unroll
            for (int kk = 0; kk < (REGS ? D / 16 : 1); kk++) {
                ldsm_x4(qa[kk], frag_a(sQ, S, warp * 16, kk * 16));
                ldsm_x4(ga[kk], frag_a(sG, S, warp * 16, kk * 16));
            }
        }
        if (j == 0) {
            // D_i = Σ O·dO of the warp's rows, two lanes a row, O from global and dO from
            // its tile; written for the dk/dv kernel, which runs after this one.
            const int r = warp * 16 + lane / 2, half = lane % 2;
            const X* orow = o + mrow + (unsigned long long)r * ors + half * (D / 2);
            const X* grow = sG + r * S + half * (D / 2);
            float sum = 0.0f;
#pragma unroll
            for (int c = 0; c < D / 16; c++)
                sum += dot8(*(const u4*)(orow + c * 8), *(const u4*)(grow + c * 8));
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            if (half == 0) dd[r0 - warp * 16 + r] = sum;
            Di[0] = __shfl_sync(0xffffffffu, sum, 2 * g);
            Di[1] = __shfl_sync(0xffffffffu, sum, 2 * g + 16);
        }
        const X* kt = sK + buf * FL_TILE * S;
        const X* vt = sV + buf * FL_TILE * S;
        float s[FL_TILE / 8][4], dp[FL_TILE / 8][4];
#pragma unroll
        for (int n = 0; n < FL_TILE / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        mma_abt<D, !REGS>(s, qa, sQ, warp * 16, kt);   // S = Q·Kᵀ
        mma_abt<D, !REGS>(dp, ga, sG, warp * 16, vt);  // dP = dO·Vᵀ
        const bool diag = j == qb;
#pragma unroll
        for (int nt = 0; nt < FL_TILE / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = warp * 16 + g + e / 2 * 8, c = nt * 8 + t2 + e % 2;  // query, key
                float p = diag && c > r ? 0.0f : exp2_fast(s[nt][e] * sl2 - L2[e / 2]);
                s[nt][e] = p * (dp[nt][e] - Di[e / 2]);
            }
        mma_pb<D>(dqa, s, kt);  // dQ += dS·K
        __syncthreads();  // the buffers are refilled next iteration
    }
    store_rows<D>(dq + b * gbs + (long long)h * ghs + (long long)(qb * FL_TILE + warp * 16) * grs,
                  grs, dqa, scale);
}

#define FL_BODY(call) call
#else
// fp32, and every precision on GPUs before Ampere, runs the scalar kernels; these entry
// points exist so every build has the same kernel list, and are never launched
// (`Heads::tensor_cores`).
#define FL_BODY(call)
#endif

extern "C" {

#define FLASH_TC(D)                                                                         \
    __global__ void __launch_bounds__(FL_THREADS)                                           \
        flash_fwd_tc##D(X* o, float* lse, const X* q, const X* k, const X* v, int T, int H, \
                        float scale) {                                                      \
        FL_BODY((flash_fwd_tc<D>(o, lse, q, k, v, T, H, scale)));                           \
    }                                                                                       \
    __global__ void __launch_bounds__(FL_THREADS)                                           \
        flash_bwd_dkdv_tc##D(X* dk, X* dv, long long gbs, int ghs, int grs, const X* q,     \
                             const X* k, const X* v, const X* dout, const float* lse,       \
                             const float* dd, int T, int H, float scale) {                  \
        FL_BODY((flash_bwd_dkdv_tc<D>(dk, dv, gbs, ghs, grs, q, k, v, dout, lse, dd, T, H,  \
                                      scale)));                                             \
    }                                                                                       \
    __global__ void __launch_bounds__(FL_THREADS)                                           \
        flash_bwd_dq_tc##D(X* dq, long long gbs, int ghs, int grs, const X* q, const X* k,  \
                           const X* v, const X* dout, const X* o, const float* lse,         \
                           float* dd, int T, int H, float scale) {                          \
        FL_BODY((flash_bwd_dq_tc<D>(dq, gbs, ghs, grs, q, k, v, dout, o, lse, dd, T, H,     \
                                    scale)));                                               \
    }

FLASH_TC(32)
FLASH_TC(64)
FLASH_TC(128)

}  // extern "C"
