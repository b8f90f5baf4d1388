/* tbcoll data types and reduction operators, shared by the C and C++ APIs. */
#ifndef TBCOLL_TYPES_H_
#define TBCOLL_TYPES_H_

#ifdef __cplusplus
extern "C" {
#endif

/** Element types. Values are stable (part of the ABI and of the wire signature) and equal NCCL's, as are the
 *  aliases NCCL has (tbcollChar, tbcollInt, tbcollHalf, tbcollFloat, tbcollDouble), so a port from NCCL is a
 *  rename. */
typedef enum {
  tbcollInt8 = 0,
  tbcollChar = 0,
  tbcollUint8 = 1,
  tbcollInt32 = 2,
  tbcollInt = 2,
  tbcollUint32 = 3,
  tbcollInt64 = 4,
  tbcollUint64 = 5,
  tbcollFloat16 = 6,
  tbcollHalf = 6,
  tbcollFloat32 = 7,
  tbcollFloat = 7,
  tbcollFloat64 = 8,
  tbcollDouble = 8,
  tbcollBfloat16 = 9,
  tbcollNumTypes = 10
} tbcollDataType_t;

/** Reduction operators, numbered as NCCL's. Integer sum and prod wrap around (two's complement), as in NCCL. Avg: integer types
 *  divide the wrapped sum by the world size, truncating toward zero; f32, f64 and bf16 divide the sum once at
 *  the end (their sums overflow only within a factor world-size of ~3.4e38); f16, whose sums overflow at 65504,
 *  divides every input by the world size first (rounded to nearest even) and sums the quotients, as NCCL's
 *  pre-multiplied average does (only an average within rounding of 65504 can still round up to inf). */
typedef enum {
  tbcollSum = 0,
  tbcollProd = 1,
  tbcollMax = 2,
  tbcollMin = 3,
  tbcollAvg = 4,
  tbcollNumOps = 5,  /**< and the first value of the operators tbcollRedOpCreatePreMulSum makes */
  tbcollMaxRedOp = 0x7fffffff  /**< the largest value an operator may have (as ncclMaxRedOp): any int fits */
} tbcollRedOp_t;

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TBCOLL_TYPES_H_
