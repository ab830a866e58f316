/* operand_io.cuh — put/get of one float and put4/get4 of four for the kernels that write
 * or read an operand activation, fp32 or bf16 ([Note: operand activations] in
 * src/backend/backend.h). Device code only: kernels.cu includes it after the CUDA headers,
 * test/ce_sim.cc after test/flash_sim.h's host stand-ins. */
#ifndef PP_OPERAND_IO_CUH
#define PP_OPERAND_IO_CUH

/* The kernels that write or read an operand activation are templates over its type, fp32
 * or bf16 (c->op); put rounds to nearest even, put4 stores four (16 bytes of fp32, 8 of
 * bf16). */
static __device__ __forceinline__ void put(float *y, float v) { *y = v; }
static __device__ __forceinline__ void put(__nv_bfloat16 *y, float v) {
    *y = __float2bfloat16_rn(v);
}
static __device__ __forceinline__ float get(const float *x) { return *x; }
static __device__ __forceinline__ float get(const __nv_bfloat16 *x) { return __bfloat162float(*x); }
static __device__ __forceinline__ float4 get4(const float *x) {
    return *reinterpret_cast<const float4 *>(x);
}
static __device__ __forceinline__ float4 get4(const __nv_bfloat16 *x) {
    uint2 u = *reinterpret_cast<const uint2 *>(x);
    float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x));
    float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}
static __device__ __forceinline__ void put4(float *y, float4 v) {
    *reinterpret_cast<float4 *>(y) = v;
}
static __device__ __forceinline__ void put4(__nv_bfloat16 *y, float4 v) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<const unsigned *>(&lo);
    u.y = *reinterpret_cast<const unsigned *>(&hi);
    *reinterpret_cast<uint2 *>(y) = u;
}

#endif
