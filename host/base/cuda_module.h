/* The CUDA module's C interface (backends/cuda/cuda_module.cpp), opened by the host at run time (base/devices.cpp).
 * Error text is written into err (err_size bytes, NUL-terminated). */
#ifndef TOKENHOST_CUDA_MODULE_H
#define TOKENHOST_CUDA_MODULE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices, or -1 with err set when the runtime or driver is unusable. */
int tokenhost_cuda_device_count(char *err, size_t err_size);
/* Name and total memory of device index; 0 on success. */
int tokenhost_cuda_device_info(int index, char *name, size_t name_size, uint64_t *memory_bytes);
/* cudaMalloc on device index; NULL with err set on failure. */
void *tokenhost_cuda_alloc(int index, size_t bytes, char *err, size_t err_size);
void tokenhost_cuda_free(void *ptr);

#ifdef __cplusplus
}
#endif

#endif
