/* tbcoll data types and reduction operators, shared by the C and C++ APIs. */
#ifndef TBCOLL_TYPES_H_
#define TBCOLL_TYPES_H_

#ifdef __cplusplus
extern "C" {
#endif

/** Element types. Values are stable (part of the ABI and of the wire signature). */
typedef enum {
  tbcollInt8 = 0,
  tbcollUint8 = 1,
  tbcollInt32 = 2,
  tbcollUint32 = 3,
  tbcollInt64 = 4,
  tbcollUint64 = 5,
  tbcollFloat16 = 6,
  tbcollFloat32 = 7,
  tbcollFloat64 = 8,
  tbcollBfloat16 = 9,
  tbcollNumTypes = 10
} tbcollDataType_t;

/** Reduction operators. Integer sum and prod wrap around (two's complement), as in NCCL. Avg is the sum divided
 *  by the world size: for integer types the wrapped sum, divided with truncation toward zero; for float types
 *  the sum may overflow to inf where the inputs are within a factor world-size of the type's largest value
 *  (f16: 65504), which NCCL's pre-multiplied average avoids. */
typedef enum {
  tbcollSum = 0,
  tbcollProd = 1,
  tbcollMax = 2,
  tbcollMin = 3,
  tbcollAvg = 4,
  tbcollNumOps = 5
} tbcollRedOp_t;

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TBCOLL_TYPES_H_
