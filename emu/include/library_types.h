/* library_types.h (emulator): cudaDataType as CUDA defines it (the values cuBLAS and NCCL calls carry). */
#ifndef INFER_EMU_LIBRARY_TYPES_H
#define INFER_EMU_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_8I = 3,
    CUDA_R_32I = 10,
    CUDA_R_16BF = 14
} cudaDataType;

#endif
