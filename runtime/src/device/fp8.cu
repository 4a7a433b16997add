
// ---- fp8 (`precision = fp8`, device/fp8.rs) ---------------------------------------------
//
// Appended to kernels.cu by `cuda::SOURCE` (it uses X, ld, Pack and warp_max from there).
// Every scaled tensor has four floats of state `m`: m[0] the inverse scale (what cuBLASLt's
// A/B scale pointers read: the product of the fp8 values times it is the true product), m[1]
// the scale the cast multiplies by, m[2] the amax of what was cast since the last roll (its
// bits: non-negative floats order as unsigned ints, so atomicMax on the bits is the float
// max, and the result does not depend on the order blocks finish in), m[3] the format's
// largest finite value (448 for E4M3, 57344 for E5M2).

// Two floats to two fp8 values, rounded to nearest even and saturated to the largest finite
// value (`satfinite`): `hi` in the upper byte, `lo` in the lower (PTX `cvt`). Hopper and Ada
// (sm_89+) convert in hardware; elsewhere fp8 never runs (device/fp8.rs refuses it) and the
// kernels compile to a stub so the module still builds for every GPU.
__device__ __forceinline__ unsigned short fp8x2(float hi, float lo, int e5m2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short d;
    if (e5m2)
        asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
    return d;
#else
    return 0;
#endif
}

#define FP8_TILE 64
// Tiles a block casts, one under another: a quarter of the blocks, and of their atomics.
#define FP8_TILES 4

extern "C" {

// q[rows, cols] = fp8(x · scale) and qt[cols, rows] = its transpose, either may be null (both
// null: the amax alone); max |x| folded into m[2]. A block casts FP8_TILES 64 × 64 tiles down
// one column of tiles: 8 elements a thread a load (16 bytes of bf16) into a shared tile,
// written row-wise as 8-byte stores and column-wise as 8-byte stores of 8 rows. rows and
// cols are multiples of 16 (the fp8 products' own requirement), so an 8-element chunk is
// wholly inside or outside. Grid (ceil(cols / 64), ceil(rows / (64 · FP8_TILES))), 256
// threads.
__global__ void __launch_bounds__(256) fp8_cast_t(unsigned char* q, unsigned char* qt,
                                                  const X* x, long rows, int cols, float* m,
                                                  int e5m2) {
    // Rows 68 bytes (17 banks) apart: a warp's column reads, rows 8 apart, meet each bank at
    // most twice (72-byte rows met one bank four times).
    __shared__ __align__(16) unsigned char tile[FP8_TILE][FP8_TILE + 4];
    float scale = m[1];
    int c0 = blockIdx.x * FP8_TILE;
    int t = threadIdx.x;
    float amax = 0.0f;
    int cc = (t % 8) * 8;
    for (int k0 = 0; k0 < FP8_TILES; k0++) {
        long r0 = ((long)blockIdx.y * FP8_TILES + k0) * FP8_TILE;
        if (r0 >= rows) break;  // the same for the whole block
        for (int it = 0; it < 2; it++) {
            int rr = t / 8 + 32 * it;
            long r = r0 + rr;
            int c = c0 + cc;
            if (r < rows && c < cols) {
                const X* src = x + r * cols + c;
                float v[8];
#if PLANC_X == 0
                float4 a = *(const float4*)src, b = *(const float4*)(src + 4);
                v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
                v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
#else
                Pack pk;
                pk.u = *(const uint4*)src;
                for (int k = 0; k < 8; k++) v[k] = ld(pk.x[k]);
#endif
                union {
                    uint2 u;
                    unsigned h2[2];
                    unsigned short h[4];
                } o;
                for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(v[k]));
                for (int k = 0; k < 4; k++)
                    o.h[k] = fp8x2(v[2 * k + 1] * scale, v[2 * k] * scale, e5m2);
                // A tile row starts 4-byte aligned (68 bytes apart): two 4-byte stores.
                *(unsigned*)&tile[rr][cc] = o.h2[0];
                *(unsigned*)&tile[rr][cc + 4] = o.h2[1];
                if (q) *(uint2*)(q + r * cols + c) = o.u;
            }
        }
        if (qt) {
            __syncthreads();
            int rc = (t % 8) * 8;
            for (int it = 0; it < 2; it++) {
                int cl = t / 8 + 32 * it;
                int c = c0 + cl;
                long r = r0 + rc;
                if (c < cols && r < rows) {
                    union {
                        uint2 u;
                        unsigned char b[8];
                    } o;
                    for (int k = 0; k < 8; k++) o.b[k] = tile[rc + k][cl];
                    *(uint2*)(qt + (long)c * rows + r) = o.u;
                }
            }
            // The next tile overwrites this one.
            __syncthreads();
        }
    }
    // One atomic a block, not a warp: every block's lands on the same word, and L2 serves
    // those one at a time (a warp's each left a 2048 x 16384 cast at 16 % of the copy rate
    // under Nsight Compute on the H200, a block's at 41 % with a tile a block).
    amax = block_max(amax);
    if (t == 0 && amax > 0.0f) atomicMax((unsigned*)(m + 2), __float_as_uint(amax));
}

// The scale from the amax cast so far (m[2]): a tensor's first casts, before any history
// exists, scale from their own amax (the cast then runs twice: amax alone, then the values).
// One thread.
__global__ void fp8_scale_now(float* m) {
    float a = m[2];
    if (a > 0.0f && a < INFINITY) {
        float s = fminf(m[3] / a, 3.0e38f);
        m[1] = s;
        m[0] = 1.0f / s;
    }
}

// Delayed scaling at a step's start, one block a tensor: the amax of the step before goes
// into the tensor's history at `slot` (a ring of `len`), the scale becomes the format's
// largest value over the history's largest amax (margin 0, as Transformer Engine's
// `DelayedScaling` with `amax_compute_algo = "max"`), and the amax restarts at 0. A history
// whose largest amax is 0 or not finite keeps the scale it had.
__global__ void fp8_roll(float* meta, float* hist, int len, int slot) {
    float* m = meta + 4 * (long)blockIdx.x;
    float* h = hist + (long)len * blockIdx.x;
    if (threadIdx.x == 0) h[slot] = m[2];
    __syncthreads();
    float a = 0.0f;
    for (int i = threadIdx.x; i < len; i += blockDim.x) a = fmaxf(a, h[i]);
    a = block_max(a);
    if (threadIdx.x == 0) {
        if (a > 0.0f && a < INFINITY) {
            float s = fminf(m[3] / a, 3.0e38f);
            m[1] = s;
            m[0] = 1.0f / s;
        }
        m[2] = 0.0f;
    }
}

}  // extern "C"
